#include "services/job/job_spec_validation.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/cli/utf8.h"
#include "services/job/device_name.h"
#include "services/job/enum_names.h"
#include "services/job/job_spec_defaults.h"
#include "services/model/architecture_catalog.h"

namespace petra::job {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::GetEnumDescriptor;

// Upper bounds far beyond any real job; they exist so that a typo such as an
// extra zero is reported instead of stalling a fleet.
constexpr uint32_t kMaxAccumulationSteps = 4096;
constexpr uint32_t kMaxMicroBatchSize = 65536;
constexpr uint32_t kMaxEpochs = 100000;
constexpr uint32_t kMaxClasses = 1000000;
constexpr double kMaxWidth = 8.0;
constexpr uint32_t kMaxEmbedDim = 8192;
constexpr uint32_t kMaxDepth = 256;
constexpr double kMaxMlpRatio = 16.0;
constexpr int64_t kMaxTokens = 4096;
constexpr uint32_t kMaxCropPadding = 64;
constexpr size_t kMaxNameLength = 128;

class Problems {
 public:
  template <typename V>
  void Add(const std::string& field, const V& value, const std::string& why) {
    list_.push_back(absl::StrCat(field, " = ", value, ": ", why));
  }
  void AddRaw(std::string text) { list_.push_back(std::move(text)); }
  bool empty() const { return list_.empty(); }
  absl::Status ToStatus() const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", absl::StrJoin(list_, "; ")));
  }

 private:
  std::vector<std::string> list_;
};

std::string Num(double v) { return absl::StrFormat("%g", v); }

// Every free-text field of the spec must be UTF-8 (devices are checked
// against their few ASCII forms already).
void CheckText(const petra::v1::JobSpec& s, Problems& p) {
  using Field = std::pair<const char*, const std::string*>;
  for (const auto& [field, value] :
       {Field{"name", &s.name()}, Field{"dataset.path", &s.dataset().path()},
        Field{"checkpoint.resume_from_job",
              &s.checkpoint().resume_from_job()}}) {
    // proto3 strings must be UTF-8: a spec that is not cannot be sent over
    // gRPC or written as the JSON job record.
    if (!cli::IsUtf8(*value)) {
      p.Add(field, absl::StrCat("\"", absl::CHexEscape(*value), "\""),
            "must be UTF-8 text");
    }
  }
}

// An enum must be a value the proto declares (proto3 keeps unknown numbers).
template <typename E>
bool CheckEnum(Problems& p, const std::string& field, int value,
               bool required) {
  const EnumDescriptor* type = GetEnumDescriptor<E>();
  if (type->FindValueByNumber(value) == nullptr) {
    p.Add(field, value,
          absl::StrCat("unknown value (expected one of ",
                       absl::StrJoin(EnumShortNames(type), ", "), ")"));
    return false;
  }
  if (required && value == 0) {
    p.Add(field, "unspecified",
          absl::StrCat("required (one of ",
                       absl::StrJoin(EnumShortNames(type), ", "), ")"));
    return false;
  }
  return true;
}

// revvit and vit are sized by model.transformer (resolved: every size set),
// the CNNs by width alone.
void CheckTransformer(const petra::v1::ModelSpec& m, bool variant_ok,
                      Problems& p) {
  if (!model::IsTransformer(m.architecture())) {
    if (m.has_transformer()) {
      p.Add("model.transformer", "set",
            "only revvit and vit have transformer sizes (a CNN's size is "
            "model.width)");
    }
    return;
  }
  const petra::v1::TransformerSpec& t = m.transformer();
  if (m.width() != 1.0) {
    p.Add("model.width", Num(m.width()),
          "revvit and vit are sized by model.transformer (--embed-dim, "
          "--depth, --heads, --mlp-ratio, --patch-size); width must be 1");
  }
  if (t.embed_dim() < 1 || t.embed_dim() > kMaxEmbedDim) {
    p.Add("model.transformer.embed_dim", t.embed_dim(),
          absl::StrCat("must be in [1, ", kMaxEmbedDim, "]"));
  }
  if (t.depth() < 1 || t.depth() > kMaxDepth) {
    p.Add("model.transformer.depth", t.depth(),
          absl::StrCat("must be in [1, ", kMaxDepth, "]"));
  }
  if (t.heads() < 1 || (t.embed_dim() > 0 && t.embed_dim() % t.heads() != 0)) {
    p.Add("model.transformer.heads", t.heads(),
          absl::StrCat("must divide embed_dim (", t.embed_dim(), ")"));
  }
  if (!std::isfinite(t.mlp_ratio()) || t.mlp_ratio() <= 0 ||
      t.mlp_ratio() > kMaxMlpRatio) {
    p.Add("model.transformer.mlp_ratio", Num(t.mlp_ratio()),
          absl::StrCat("must be in (0, ", Num(kMaxMlpRatio), "]"));
  }
  const bool conv_stem = CheckEnum<petra::v1::TransformerSpec::Stem>(
                             p, "model.transformer.stem", t.stem(), true) &&
                         t.stem() == petra::v1::TransformerSpec::STEM_CONV;
  const int64_t side = model::InputShape(m.variant())[1];
  if (variant_ok && (t.patch_size() < 1 || side % t.patch_size() != 0)) {
    p.Add("model.transformer.patch_size", t.patch_size(),
          absl::StrCat("must divide the input's side (", side, " for variant ",
                       EnumShortName(m.variant()), ")"));
  } else if (variant_ok &&
             (side / t.patch_size()) * (side / t.patch_size()) > kMaxTokens) {
    // Attention costs tokens^2 per head: beyond this it is memory, not a
    // model.
    p.Add("model.transformer.patch_size", t.patch_size(),
          absl::StrCat("gives ",
                       (side / t.patch_size()) * (side / t.patch_size()),
                       " tokens of a ", side, "x", side, " input; at most ",
                       kMaxTokens, " (a larger patch)"));
  } else if (variant_ok && conv_stem &&
             !model::ConvStemFits(side, t.patch_size())) {
    p.Add("model.transformer.patch_size", t.patch_size(),
          absl::StrCat("the conv stem's stride-2 convolutions take ", side,
                       " to ", model::ConvStemSide(side, t.patch_size()),
                       " tokens a side, not ", side / t.patch_size(),
                       "; use a power of two or --stem patch"));
  }
}

void CheckModelAndData(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::ModelSpec& m = s.model();
  CheckEnum<petra::v1::Architecture>(p, "model.architecture", m.architecture(),
                                     true);
  bool variant_ok =
      CheckEnum<petra::v1::Variant>(p, "model.variant", m.variant(), false);
  if (!std::isfinite(m.width()) || m.width() <= 0 || m.width() > kMaxWidth) {
    p.Add("model.width", Num(m.width()),
          absl::StrCat("must be in (0, ", Num(kMaxWidth), "]"));
  }
  // Its squeezes halve the resolution three times exactly: 28x28 cannot.
  if (variant_ok && m.architecture() == petra::v1::ARCHITECTURE_IREVNET18 &&
      m.variant() == petra::v1::VARIANT_MNIST) {
    p.Add("model.variant", "mnist",
          "irevnet18 squeezes 2x2 pixels three times and needs sides "
          "divisible by 8 (variant cifar or imagenet), not 28x28");
  }
  CheckTransformer(m, variant_ok, p);
  if (m.num_classes() < 2 || m.num_classes() > kMaxClasses) {
    p.Add("model.num_classes", m.num_classes(),
          absl::StrCat("must be in [2, ", kMaxClasses, "]"));
  }

  const petra::v1::DatasetSpec& d = s.dataset();
  bool kind_ok =
      CheckEnum<petra::v1::DatasetKind>(p, "dataset.kind", d.kind(), true);
  const bool folder = d.kind() == petra::v1::DATASET_KIND_IMAGE_FOLDER;
  if (folder && d.path().empty()) {
    p.Add("dataset.path", "\"\"",
          "an image folder needs its directory (train/ and test/ in it)");
  }
  if (!folder && d.has_image_folder()) {
    p.Add("dataset.image_folder", "set", "only for dataset kind image_folder");
  }
  if (folder) {
    const petra::v1::ImageFolderSpec& f = d.image_folder();
    CheckEnum<petra::v1::ImageFolderSpec::CorruptImagePolicy>(
        p, "dataset.image_folder.corrupt_images", f.corrupt_images(), true);
    const int channels = m.variant() == petra::v1::VARIANT_MNIST ? 1 : 3;
    if (f.mean_size() != f.std_size() ||
        (f.mean_size() != 0 && f.mean_size() != channels)) {
      p.Add("dataset.image_folder.mean",
            absl::StrCat(f.mean_size(), " means, ", f.std_size(), " stds"),
            absl::StrCat("give both or neither, one per channel (", channels,
                         ")"));
    }
    for (double v : f.std()) {
      if (!(v > 0) || !std::isfinite(v)) {
        p.Add("dataset.image_folder.std", v, "must be finite and above 0");
      }
    }
    for (double v : f.mean()) {
      if (!std::isfinite(v)) {
        p.Add("dataset.image_folder.mean", v, "must be finite");
      }
    }
  }
  if (kind_ok && variant_ok && !folder &&
      d.kind() != petra::v1::DATASET_KIND_SYNTHETIC) {
    const bool mnist_like = d.kind() == petra::v1::DATASET_KIND_FASHION_MNIST ||
                            d.kind() == petra::v1::DATASET_KIND_MNIST;
    const petra::v1::Variant needed =
        mnist_like ? petra::v1::VARIANT_MNIST : petra::v1::VARIANT_CIFAR;
    if (m.variant() != needed) {
      p.Add("model.variant", EnumShortName(m.variant()),
            absl::StrCat("dataset ", EnumShortName(d.kind()), " needs variant ",
                         EnumShortName(needed)));
    }
    if (m.num_classes() != 10) {
      p.Add(
          "model.num_classes", m.num_classes(),
          absl::StrCat("dataset ", EnumShortName(d.kind()), " has 10 classes"));
    }
  }
  // Paths are resolved under --data-root; they may not climb out of it.
  for (absl::string_view part : absl::StrSplit(d.path(), '/')) {
    if (part == "..") {
      p.Add("dataset.path", absl::StrCat("\"", d.path(), "\""),
            "may not contain \"..\"");
      break;
    }
  }
  if (d.synthetic_train_size() == 0) {
    p.Add("dataset.synthetic_train_size", 0, "must be at least 1");
  }
  if (d.synthetic_test_size() == 0) {
    p.Add("dataset.synthetic_test_size", 0, "must be at least 1");
  }
  if (d.augmentation().random_crop_padding() > kMaxCropPadding) {
    p.Add("dataset.augmentation.random_crop_padding",
          d.augmentation().random_crop_padding(),
          absl::StrCat("must be at most ", kMaxCropPadding));
  }
}

void CheckPartitionAndDevices(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::PartitionSpec& part = s.partition();
  CheckEnum<petra::v1::PartitionSpec::Cost>(p, "partition.cost", part.cost(),
                                            false);
  absl::StatusOr<model::ArchitectureInfo> arch =
      model::GetArchitectureInfo(s.model());
  if (part.layout_case() == petra::v1::PartitionSpec::kPerBlock &&
      !part.per_block()) {
    p.Add("partition.per_block", "false",
          "set per_block: true or give stage_count");
  }
  if (part.layout_case() == petra::v1::PartitionSpec::kSplits) {
    const auto& at = part.splits().split_at();
    for (int i = 0; i < at.size(); ++i) {
      const uint32_t previous = i == 0 ? 0 : at[i - 1];
      if (at[i] <= previous ||
          (arch.ok() &&
           at[i] >= static_cast<uint32_t>(arch->per_block_stages))) {
        p.Add(absl::StrCat("partition.splits.split_at[", i, "]"), at[i],
              absl::StrCat(
                  "must be greater than ", previous,
                  arch.ok()
                      ? absl::StrCat(" and less than ", arch->per_block_stages,
                                     " (", arch->display_name, "'s blocks)")
                      : ""));
      }
    }
  }
  if (part.layout_case() == petra::v1::PartitionSpec::kStageCount) {
    if (part.stage_count() == 0) {
      p.Add("partition.stage_count", 0, "must be at least 1");
    } else if (arch.ok() && part.stage_count() >
                                static_cast<uint32_t>(arch->per_block_stages)) {
      p.Add("partition.stage_count", part.stage_count(),
            absl::StrCat(arch->display_name, " has ", arch->per_block_stages,
                         " blocks (stem, ", arch->residual_blocks,
                         " residual blocks, head), so at most ",
                         arch->per_block_stages, " stages"));
    }
  }
  for (int i = 0; i < s.devices_size(); ++i) {
    absl::StatusOr<DeviceName> dev =
        ParseDeviceName(s.devices(i), absl::StrCat("devices[", i, "]"));
    if (!dev.ok()) p.AddRaw(std::string(dev.status().message()));
  }
  if (arch.ok() && s.devices_size() > 1 && StageCount(s) > 0 &&
      s.devices_size() != StageCount(s)) {
    p.Add("devices", absl::StrCat("[", absl::StrJoin(s.devices(), ", "), "]"),
          absl::StrCat(s.devices_size(), " entries, but the job has ",
                       StageCount(s), " stages (give none, one, or ",
                       StageCount(s), ")"));
  }
}

// Mode forward_gradient and its own field, each only with the other.
void CheckForwardGradient(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::TrainingSpec& t = s.training();
  if (t.mode() != petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    if (t.has_forward_gradient()) {
      p.Add("training.forward_gradient", "set",
            absl::StrCat("only valid with mode forward_gradient, not ",
                         EnumShortName(t.mode())));
    }
    return;
  }
  CheckEnum<petra::v1::ForwardGradientSpec::Guess>(
      p, "training.forward_gradient.guess", t.forward_gradient().guess(),
      false);
  const int stages = StageCount(s);
  if (stages == 1) {
    p.Add("training.mode", "forward_gradient",
          "needs 2 or more stages: every stage but the last needs an "
          "auxiliary head on its output, and with one stage there is none "
          "(its exact gradient is plain backprop)");
  }
  if (t.overlap_rebuild()) {
    p.Add("training.overlap_rebuild", "true",
          "forward_gradient rebuilds nothing (there is no backward pass to "
          "overlap)");
  }
  if (t.non_finite() ==
      petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH) {
    p.Add("training.non_finite", "skip_micro_batch",
          "forward_gradient fails on NaN or Inf: a skipped micro-batch would "
          "still move each stage along its guess");
  }
}

// The rebuild's weights: only where a stage rebuilds its input, and only
// weights that exist (a stash for STASHED).
void CheckRebuildWith(const petra::v1::TrainingSpec& t, Problems& p) {
  using petra::v1::TrainingSpec;
  if (!CheckEnum<TrainingSpec::RebuildWith>(p, "training.rebuild_with",
                                            t.rebuild_with(), false) ||
      t.rebuild_with() == TrainingSpec::REBUILD_WITH_UNSPECIFIED) {
    return;
  }
  const std::string value = EnumShortName(t.rebuild_with());
  if (t.mode() != petra::v1::TRAINING_MODE_PETRA &&
      t.mode() != petra::v1::TRAINING_MODE_DELAYED) {
    p.Add("training.rebuild_with", value,
          absl::StrCat("only valid with modes petra and delayed, not ",
                       EnumShortName(t.mode()), " (it rebuilds nothing)"));
  } else if (t.stash_inputs()) {
    p.Add("training.rebuild_with", value,
          "nothing is rebuilt when stash_inputs keeps every input");
  } else if (t.rebuild_with() == TrainingSpec::REBUILD_WITH_STASHED &&
             !t.stash_weights()) {
    p.Add("training.rebuild_with", value,
          "needs stashed weights: mode delayed with stash_weights (petra "
          "keeps none)");
  }
}

// Weight prediction and spike compensation need a delay to act across and
// momentum to act on.
void CheckMomentumCorrection(const petra::v1::JobSpec& s, bool on,
                             const std::string& field, Problems& p) {
  if (!on) return;
  const petra::v1::TrainingMode mode = s.training().mode();
  if (mode != petra::v1::TRAINING_MODE_PETRA &&
      mode != petra::v1::TRAINING_MODE_DELAYED) {
    p.Add(field, "true",
          absl::StrCat("only valid with modes petra and delayed, not ",
                       EnumShortName(mode),
                       " (no delayed gradient to correct for)"));
  } else if (s.optimizer().kind() == petra::v1::OptimizerSpec::KIND_ADAMW) {
    // Weight prediction reads AdamW's step direction; spike compensation's
    // coefficients are momentum SGD's alone.
    if (field == "training.spike_compensation") {
      p.Add(field, "true",
            "needs optimizer kind sgd: its catch-up is momentum SGD's "
            "(use --predict-weights with adamw)");
    }
  } else if (s.optimizer().momentum() == 0) {
    p.Add(field, "true",
          "needs optimizer.momentum > 0: it acts through the momentum buffer");
  }
}

void CheckTraining(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::TrainingSpec& t = s.training();
  if (CheckEnum<petra::v1::TrainingMode>(p, "training.mode", t.mode(), false)) {
    if (t.mode() != petra::v1::TRAINING_MODE_DELAYED) {
      if (t.stash_inputs()) {
        p.Add("training.stash_inputs", "true",
              absl::StrCat("only valid with mode delayed, not ",
                           EnumShortName(t.mode())));
      }
      if (t.stash_weights()) {
        p.Add("training.stash_weights", "true",
              absl::StrCat("only valid with mode delayed, not ",
                           EnumShortName(t.mode())));
      }
    } else if (!t.stash_inputs() && !t.stash_weights()) {
      p.Add("training.mode", "delayed",
            "needs stash_inputs and/or stash_weights (without either it is "
            "mode petra)");
    }
    CheckForwardGradient(s, p);
    CheckRebuildWith(t, p);
    CheckMomentumCorrection(s, t.predict_weights(), "training.predict_weights",
                            p);
    CheckMomentumCorrection(s, t.spike_compensation(),
                            "training.spike_compensation", p);
    if (t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT &&
        t.end_to_end_every() > 0) {
      p.Add("training.end_to_end_every", t.end_to_end_every(),
            "not with mode forward_gradient, whose estimate the gradient "
            "diagnostic (grad_diagnostics_every) compares with the true "
            "gradient");
    }
  }
  if (t.accumulation_steps() < 1 ||
      t.accumulation_steps() > kMaxAccumulationSteps) {
    p.Add("training.accumulation_steps", t.accumulation_steps(),
          absl::StrCat("must be in [1, ", kMaxAccumulationSteps, "]"));
  }
  if (t.micro_batch_size() < 1 || t.micro_batch_size() > kMaxMicroBatchSize) {
    p.Add("training.micro_batch_size", t.micro_batch_size(),
          absl::StrCat("must be in [1, ", kMaxMicroBatchSize, "]"));
  }
  if (t.epochs() < 1 || t.epochs() > kMaxEpochs) {
    p.Add("training.epochs", t.epochs(),
          absl::StrCat("must be in [1, ", kMaxEpochs, "]"));
  }
  CheckEnum<petra::v1::TrainingSpec::NonFinitePolicy>(p, "training.non_finite",
                                                      t.non_finite(), false);
  if (CheckEnum<petra::v1::TrainingSpec::Precision>(p, "training.precision",
                                                    t.precision(), false) &&
      t.precision() == petra::v1::TrainingSpec::PRECISION_BF16 &&
      t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    p.Add("training.precision", "bf16",
          "not with mode forward_gradient, whose forward-mode derivatives "
          "run in fp32 only; use fp32");
  }
  CheckEnum<petra::v1::TrainingSpec::MemoryFormat>(p, "training.memory_format",
                                                   t.memory_format(), false);
  if (CheckEnum<petra::v1::TrainingSpec::WireDtype>(p, "training.wire_dtype",
                                                    t.wire_dtype(), false) &&
      t.wire_dtype() == petra::v1::TrainingSpec::WIRE_DTYPE_BF16 &&
      t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    p.Add("training.wire_dtype", "bf16",
          "not with mode forward_gradient, whose tangents travel in fp32; "
          "use fp32");
  }
}

void CheckOptimizerAndSchedule(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::OptimizerSpec& o = s.optimizer();
  CheckEnum<petra::v1::Recipe>(p, "recipe", s.recipe(), false);
  CheckEnum<petra::v1::Transport>(p, "transport", s.transport(), false);
  if (s.transport() == petra::v1::TRANSPORT_CUDA_IPC) {
    p.Add("transport", "cuda_ipc",
          "not built yet: use auto, shm or grpc (docs/DATA_PLANE.md)");
  }
  CheckEnum<petra::v1::OptimizerSpec::Kind>(p, "optimizer.kind", o.kind(),
                                            false);
  if (!std::isfinite(o.learning_rate()) || o.learning_rate() < 0) {
    p.Add("optimizer.learning_rate", Num(o.learning_rate()),
          "must be finite and >= 0");
  }
  if (o.kind() == petra::v1::OptimizerSpec::KIND_ADAMW) {
    if (s.recipe() == petra::v1::RECIPE_PAPER) {
      p.Add("optimizer.kind", "adamw",
            "not with recipe paper, whose schedule is fitted to SGD with "
            "momentum (the paper's optimizer); use recipe transformer or "
            "default");
    }
    if (o.has_momentum() || o.has_nesterov()) {
      p.Add(o.has_momentum() ? "optimizer.momentum" : "optimizer.nesterov",
            o.has_momentum() ? Num(o.momentum())
                             : (o.nesterov() ? "true" : "false"),
            "only valid with optimizer kind sgd (AdamW's momentum is beta1)");
    }
    for (const auto& [field, v] :
         {std::pair<const char*, double>{"optimizer.beta1", o.beta1()},
          {"optimizer.beta2", o.beta2()}}) {
      if (!std::isfinite(v) || v < 0 || v >= 1) {
        p.Add(field, Num(v), "must be in [0, 1)");
      }
    }
    if (!std::isfinite(o.eps()) || o.eps() <= 0) {
      p.Add("optimizer.eps", Num(o.eps()), "must be finite and > 0");
    }
  } else {
    for (const auto& [field, has, v] :
         {std::tuple<const char*, bool, double>{"optimizer.beta1",
                                                o.has_beta1(), o.beta1()},
          {"optimizer.beta2", o.has_beta2(), o.beta2()},
          {"optimizer.eps", o.has_eps(), o.eps()}}) {
      if (has) p.Add(field, Num(v), "only valid with optimizer kind adamw");
    }
    if (!std::isfinite(o.momentum()) || o.momentum() < 0 || o.momentum() >= 1) {
      p.Add("optimizer.momentum", Num(o.momentum()), "must be in [0, 1)");
    }
    if (o.nesterov() && o.momentum() == 0) {
      p.Add("optimizer.nesterov", "true", "needs momentum > 0");
    }
  }
  if (!std::isfinite(o.clip_grad_norm()) || o.clip_grad_norm() < 0) {
    p.Add("optimizer.clip_grad_norm", Num(o.clip_grad_norm()),
          "must be finite and >= 0 (0: no clipping)");
  }
  if (!std::isfinite(o.weight_decay()) || o.weight_decay() < 0) {
    p.Add("optimizer.weight_decay", Num(o.weight_decay()),
          "must be finite and >= 0");
  }

  const petra::v1::ScheduleSpec& sc = s.schedule();
  const uint32_t epochs = s.training().epochs();
  if (!std::isfinite(sc.warmup_epochs()) || sc.warmup_epochs() < 0 ||
      sc.warmup_epochs() > epochs) {
    p.Add("schedule.warmup_epochs", Num(sc.warmup_epochs()),
          absl::StrCat("must be in [0, training.epochs = ", epochs, "]"));
  }
  if (CheckEnum<petra::v1::ScheduleSpec::Decay>(p, "schedule.decay", sc.decay(),
                                                false)) {
    if (sc.decay() != petra::v1::ScheduleSpec::DECAY_STEP &&
        sc.step_epochs_size() > 0) {
      p.Add("schedule.step_epochs",
            absl::StrCat("[", absl::StrJoin(sc.step_epochs(), ", "), "]"),
            absl::StrCat("only valid with decay step, not ",
                         EnumShortName(sc.decay())));
    }
    if (sc.decay() == petra::v1::ScheduleSpec::DECAY_STEP &&
        sc.step_epochs_size() == 0) {
      p.Add("schedule.step_epochs", "[]",
            "decay step needs at least one epoch");
    }
  }
  for (int i = 0; i < sc.step_epochs_size(); ++i) {
    const uint32_t e = sc.step_epochs(i);
    if (e < 1 || e >= epochs || (i > 0 && e <= sc.step_epochs(i - 1))) {
      p.Add(absl::StrCat("schedule.step_epochs[", i, "]"), e,
            absl::StrCat("must increase and lie in [1, training.epochs = ",
                         epochs, ")"));
    }
  }
  if (!std::isfinite(sc.delay_lr_power()) || sc.delay_lr_power() < 0 ||
      sc.delay_lr_power() > 4) {
    p.Add("schedule.delay_lr_power", Num(sc.delay_lr_power()),
          "must be in [0, 4] (0: every stage at the shared rate)");
  }
  if (!std::isfinite(sc.delay_lr_anneal_epochs()) ||
      sc.delay_lr_anneal_epochs() < 0 || sc.delay_lr_anneal_epochs() > epochs) {
    p.Add("schedule.delay_lr_anneal_epochs", Num(sc.delay_lr_anneal_epochs()),
          absl::StrCat("must be in [0, training.epochs = ", epochs, "]"));
  } else if (sc.delay_lr_anneal_epochs() > 0 && !(sc.delay_lr_power() > 0)) {
    p.Add("schedule.delay_lr_anneal_epochs", Num(sc.delay_lr_anneal_epochs()),
          "anneals schedule.delay_lr_power, which is 0: set both");
  }
  if (!std::isfinite(sc.step_factor()) || sc.step_factor() <= 0 ||
      sc.step_factor() > 1) {
    p.Add("schedule.step_factor", Num(sc.step_factor()), "must be in (0, 1]");
  }
}

void CheckRest(const petra::v1::JobSpec& s, Problems& p) {
  if (s.name().size() > kMaxNameLength) {
    p.Add("name", absl::StrCat("<", s.name().size(), " characters>"),
          absl::StrCat("at most ", kMaxNameLength, " characters"));
  }
  for (unsigned char c : s.name()) {
    if (c < 0x20 || c == 0x7f) {
      p.Add("name", absl::StrCat("\"", absl::CHexEscape(s.name()), "\""),
            "may not contain control characters");
      break;
    }
  }
  if (s.evaluation().every_epochs() < 1) {
    p.Add("evaluation.every_epochs", s.evaluation().every_epochs(),
          "must be at least 1");
  }
  if (s.checkpoint().keep_last() < 1) {
    p.Add("checkpoint.keep_last", s.checkpoint().keep_last(),
          "must be at least 1");
  }
  const std::string& resume = s.checkpoint().resume_from_job();
  if (resume.find_first_of("/\\") != std::string::npos || resume == ".." ||
      resume == ".") {
    p.Add("checkpoint.resume_from_job", absl::StrCat("\"", resume, "\""),
          "must be a job id, not a path");
  }
}

}  // namespace

int StageCount(const petra::v1::JobSpec& resolved) {
  if (resolved.partition().layout_case() ==
      petra::v1::PartitionSpec::kStageCount) {
    return static_cast<int>(resolved.partition().stage_count());
  }
  if (resolved.partition().layout_case() == petra::v1::PartitionSpec::kSplits) {
    return resolved.partition().splits().split_at_size() + 1;
  }
  absl::StatusOr<model::ArchitectureInfo> arch =
      model::GetArchitectureInfo(resolved.model());
  return arch.ok() ? arch->per_block_stages : 0;
}

std::string DeviceForStage(const petra::v1::JobSpec& resolved, int index) {
  if (resolved.devices_size() == 0) return "cpu";
  if (resolved.devices_size() == 1) return resolved.devices(0);
  return index < resolved.devices_size() ? resolved.devices(index) : "cpu";
}

std::string RequestedDevice(const petra::v1::JobSpec& resolved, int index) {
  return resolved.devices_size() == 0 ? "" : DeviceForStage(resolved, index);
}

absl::StatusOr<petra::v1::JobSpec> ResolveJobSpec(
    const petra::v1::JobSpec& spec) {
  petra::v1::JobSpec resolved = spec;
  ApplyJobSpecDefaults(&resolved);
  Problems problems;
  CheckModelAndData(resolved, problems);
  CheckPartitionAndDevices(resolved, problems);
  CheckTraining(resolved, problems);
  CheckOptimizerAndSchedule(resolved, problems);
  CheckRest(resolved, problems);
  CheckText(resolved, problems);
  if (!problems.empty()) return problems.ToStatus();
  return resolved;
}

absl::Status ValidateJobSpec(const petra::v1::JobSpec& spec) {
  return ResolveJobSpec(spec).status();
}

}  // namespace petra::job

#include "services/job/job_flags.h"

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/enum_names.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_io.h"
#include "services/job/job_spec_validation.h"
#include "services/job/spec_field.h"

namespace petra::job {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::GetEnumDescriptor;
using Setter = std::function<absl::Status(const std::string&)>;

// A setter passing what `parse` returns to `set` (a proto field setter).
template <typename T, typename Parse>
Setter Parsed(Parse parse, std::function<void(T)> set) {
  return [parse, set](const std::string& v) -> absl::Status {
    absl::StatusOr<T> value = parse(v);
    if (!value.ok()) return value.status();
    set(*value);
    return absl::OkStatus();
  };
}

Setter Uint32(std::function<void(uint32_t)> set) {
  return Parsed<uint32_t>(base::ParseUnsignedValue<uint32_t>, std::move(set));
}
Setter Double(std::function<void(double)> set) {
  return Parsed<double>(base::ParseDoubleValue, std::move(set));
}
Setter Bool(std::function<void(bool)> set) {
  return Parsed<bool>(base::ParseBoolValue, std::move(set));
}

Setter Enum(const EnumDescriptor* type, std::function<void(int)> set) {
  return [type, set](const std::string& v) -> absl::Status {
    absl::StatusOr<int> n = ParseEnumShortName(type, v, "value");
    if (!n.ok()) return n.status();
    set(*n);
    return absl::OkStatus();
  };
}

std::string Choices(const EnumDescriptor* type) {
  return absl::StrJoin(EnumShortNames(type), "|");
}

std::string ShownStages(const petra::v1::PartitionSpec& p) {
  switch (p.layout_case()) {
    case petra::v1::PartitionSpec::kStageCount:
      return absl::StrCat(p.stage_count());
    case petra::v1::PartitionSpec::kSplits:
      return absl::StrCat("split at ",
                          absl::StrJoin(p.splits().split_at(), ","));
    default:
      return "per-block";
  }
}

}  // namespace

void AddTransformerFlags(base::FlagSet& f,
                         std::function<petra::v1::TransformerSpec*()> target) {
  auto t = std::move(target);
  using D = catalog::TransformerDefaults;  // the defaults the help shows
  using L = catalog::LanguageModelDefaults;
  f.AddCustom("embed-dim", "D",
              absl::StrCat(D::kEmbedDim, "; revlm/gpt ", L::kEmbedDim),
              "revvit/vit/revlm/gpt: token width",
              Uint32([t](uint32_t v) { t()->set_embed_dim(v); }));
  f.AddCustom("depth", "L", absl::StrCat(D::kDepth, "; revlm/gpt ", L::kDepth),
              "revvit/vit/revlm/gpt: transformer blocks",
              Uint32([t](uint32_t v) { t()->set_depth(v); }));
  f.AddCustom("heads", "H", absl::StrCat(D::kHeads, "; revlm/gpt ", L::kHeads),
              "revvit/vit/revlm/gpt: attention heads (divide D)",
              Uint32([t](uint32_t v) { t()->set_heads(v); }));
  f.AddCustom("mlp-ratio", "R",
              absl::StrCat(D::kMlpRatio, "; revlm/gpt ", L::kMlpRatio),
              "revvit/vit/revlm/gpt: MLP hidden width / D",
              Double([t](double v) { t()->set_mlp_ratio(v); }));
  f.AddCustom("seq-len", "T", absl::StrCat(L::kSeqLen),
              "revlm/gpt: tokens per sequence",
              Uint32([t](uint32_t v) { t()->set_seq_len(v); }));
  f.AddCustom("vocab", "V",
              absl::StrCat(L::kVocab, " for bytes, ", L::kSentencePieceVocab,
                           " for sentencepiece"),
              "revlm/gpt: vocabulary size (the tokenizer's)",
              Uint32([t](uint32_t v) { t()->set_vocab(v); }));
  f.AddCustom("tie-embeddings", "", "false",
              "revlm/gpt: the LM head uses the token embedding's weight "
              "(one stage only: --stages 1)",
              Bool([t](bool v) { t()->set_tie_embeddings(v); }));
  f.AddCustom(
      "patch-size", "P",
      absl::StrCat(
          catalog::DefaultPatchSize(petra::v1::VARIANT_MNIST), " for mnist, ",
          catalog::DefaultPatchSize(petra::v1::VARIANT_CIFAR), " for cifar, ",
          catalog::DefaultPatchSize(petra::v1::VARIANT_IMAGENET),
          " for imagenet"),
      "revvit/vit: side of a patch (divides the input's sides)",
      Uint32([t](uint32_t v) { t()->set_patch_size(v); }));
  const EnumDescriptor* stem =
      GetEnumDescriptor<petra::v1::TransformerSpec::Stem>();
  f.AddCustom("stem", Choices(stem), "conv",
              "revvit/vit: how images become tokens: patch (ViT's one "
              "strided convolution) or conv (3x3 stride-2 convolutions, "
              "then 1x1)",
              Enum(stem, [t](int v) {
                t()->set_stem(static_cast<petra::v1::TransformerSpec::Stem>(v));
              }));
}

namespace {

// One job flag that sets one JobSpec field (spec_field.h: its type, and so
// its parsing, from the proto descriptor).
struct JobFlag {
  const char* flag;
  const char* field;  // its path in JobSpec
  // What --help shows as its value: ignored for an enum (its short names);
  // "" for a bool that the flag alone sets.
  std::string value_name;
  // The default --help shows; nullopt: the field's value in the job the
  // flag goes on top of, defaults applied (one source: help and job cannot
  // disagree).
  std::optional<std::string> shown;
  std::string help;
};

// Binds each row's flag to its field of *s.
void AddRows(base::FlagSet& f, petra::v1::JobSpec* s,
             const petra::v1::JobSpec& defaulted,
             const std::vector<JobFlag>& rows) {
  for (const JobFlag& row : rows) {
    absl::StatusOr<SpecField> field = SpecField::Find(row.field);
    // The table names fields of the proto compiled in: a path that is not
    // one is this file's mistake, which every job flag test shows.
    if (!field.ok()) {
      f.AddCustom(row.flag, "", "", std::string(field.status().message()),
                  [why = field.status()](const std::string&) { return why; });
      continue;
    }
    f.AddCustom(
        row.flag, field->ValueName(row.value_name),
        row.shown ? *row.shown : field->Show(defaulted), row.help,
        [s, field = *field](const std::string& v) { return field.Set(v, s); });
  }
}

// The flags of the stages' cut, numerics and the rebuild's check.
std::vector<JobFlag> PartitionAndNumericsRows() {
  return {
      {"split-at", "partition.splits.split_at", "B1,B2,...", "none",
       "cut the stages by hand: stage i starts at block Bi (block 0 "
       "for stage 0); replaces --stages"},
      {"partition-cost", "partition.cost", "", std::nullopt,
       "with --stages N: balance by a cost estimated from the shapes "
       "(FLOPs and memory-bound layers), measured times, or FLOPs "
       "alone"},
      {"non-finite", "training.non_finite", "", std::nullopt,
       "a NaN or infinite loss fails the job, or skips the micro-batch"},
      {"precision", "training.precision", "", std::nullopt,
       "bf16: the blocks' functions under bf16 autocast; residual "
       "streams, weights, optimizer and BatchNorm statistics stay fp32"},
      {"memory-format", "training.memory_format", "", std::nullopt,
       "the layout of a stage's images and convolution weights: "
       "channels_last (auto: on a GPU, for convolutional networks) "
       "or nchw"},
      {"wire-dtype", "training.wire_dtype", "", std::nullopt,
       "what stages hand each other: fp32 (the rebuild exact to fp32 "
       "rounding) or bf16 (half the bytes, the rebuild off by bf16 "
       "rounding at each stage boundary)"},
      {"rebuild-error-every", "training.rebuild_error_every", "N", std::nullopt,
       "every N-th micro-batch, a stage that rebuilds its input "
       "measures ||x - rebuilt x|| / ||x|| (0 = off)"}};
}

// The flags of the training mode and what each mode may change.
std::vector<JobFlag> ModeRows() {
  return {
      {"mode", "training.mode", "", std::nullopt, "training mode"},
      {"schedule", "training.pipeline_schedule", "", "1f1b",
       "pipeline mode: the order of each flush's micro-batches, "
       "1F1B's (J - j activations held on stage j) or GPipe's (all "
       "of the flush's); --accumulation is the flush's M"},
      {"recompute", "training.recompute", "", "false",
       "pipeline mode: store no activations between a forward and its "
       "backward; rebuild the input (reversible stages) or keep it, and "
       "recompute"},
      {"guess", "training.forward_gradient.guess", "", "local",
       "forward_gradient mode: each stage's direction, its local "
       "loss's gradient or a Gaussian draw (local_only: step on the "
       "local gradient alone)"},
      {"stash-inputs", "training.stash_inputs", "", "false",
       "delayed mode: keep every stage's input for backward"},
      {"stash-weights", "training.stash_weights", "", "false",
       "delayed mode: keep the weights each forward used"},
      {"rebuild-with", "training.rebuild_with", "",
       "stashed with --stash-weights, else current",
       "the weights a reversible stage rebuilds its input with in "
       "backward; current with --stash-weights is the paper's Table 4 "
       "row 4 (the gradient still at the stashed weights)"},
      {"overlap-rebuild", "training.overlap_rebuild", "", "false",
       "petra: rebuild the next block while this one's gradient is computed "
       "(PaReprop; a second thread per stage)"},
      {"predict-weights", "training.predict_weights", "",
       "false (modes petra and delayed, recipes default and language_model, "
       "an optimizer with momentum: true)",
       "petra and delayed: forward at the weights predicted for when the "
       "gradient comes back (SpecTrain; not in the paper)"},
      {"spike-compensation", "training.spike_compensation", "", "false",
       "petra and delayed: a delayed stage applies at once the momentum steps "
       "its gradient missed (Kosson et al. 2021; not in the paper)"},
      {"delay-compensation", "training.delay_compensation", "LAMBDA", "0 (off)",
       "petra and delayed: correct each delayed gradient g by its weights' "
       "drift d, g + LAMBDA g*g*d / sqrt(mean g^2) (DC-ASGD, Zheng et al. "
       "2017; not in the paper)"},
      {"discrepancy-correction", "training.discrepancy_correction", "", "false",
       "petra and delayed: a delayed stage's backward at the weights its "
       "forward is estimated to have had (PipeMare, Yang et al. 2021; not in "
       "the paper)"},
      {"weight-drift-decay", "training.weight_drift_decay", "G", "0.9",
       "the decay of the average step --delay-compensation and "
       "--discrepancy-correction extrapolate the drift with, in [0, 1)"},
      {"accumulation", "training.accumulation_steps", "K", std::nullopt,
       "micro-batches averaged per optimizer step (modes petra and "
       "delayed, --micro-batch unset: 4 under recipe default, 8 under "
       "language_model, 2 under transformer; else 1); in pipeline "
       "mode the micro-batches of a flush, M (default 64 / "
       "--micro-batch, at least 2)"},
      {"micro-batch", "training.micro_batch_size", "B", std::nullopt,
       "samples per micro-batch (modes petra and delayed, "
       "--accumulation unset: 16 under recipe default, 8 under "
       "language_model, 32 under transformer; pipeline mode: 8 under "
       "language_model, else 16, or 64 / --accumulation; else 64)"},
      {"epochs", "training.epochs", "N", std::nullopt,
       "passes over the training set"},
      {"max-steps", "training.max_steps", "N", "no cap",
       "stop after N optimizer steps"},
      {"grad-diagnostics", "training.grad_diagnostics_every", "N", "0 (off)",
       "every N steps, compare PETRA's gradient with the exact delayed "
       "one (forward_gradient: the estimate with the true gradient; "
       "cosine, norm ratio; exported as metrics)"},
      {"recipe", "recipe", "",
       "transformer for revvit and vit, language_model for revlm and gpt, "
       "else default",
       "where the optimizer and schedule flags left out come from: "
       "this project's short-run defaults (SGD), the PETRA paper's "
       "(step decay and warm-up fitted to the run's length, weight "
       "decay 1e-4 on imagenet), vision transformers' (AdamW, "
       "warm-up, cosine; after DeiT) or language models' (AdamW with "
       "beta2 0.95, weight decay 0.1, clipping at norm 1, warm-up, "
       "cosine; after GPT-2 and nanoGPT); see docs/USING.md, \"Job specs\""},
      {"e2e-diagnostics", "training.end_to_end_every", "N", "0 (off)",
       "every N steps, compare each stage's applied gradient with the "
       "true end-to-end gradient of the whole network at the stages' "
       "current weights (cosine, norm ratio; metrics and --report)"}};
}

// The flags of the optimizer and the learning-rate schedule.
std::vector<JobFlag> OptimizerRows() {
  return {
      {"optimizer", "optimizer.kind", "",
       "the recipe's: adamw for transformer, else sgd",
       "SGD with (Nesterov) momentum, AdamW (weight decay "
       "decoupled, as torch.optim.AdamW), or NAdamW (torch.optim.NAdam "
       "with decoupled weight decay; with beta1 0.99, Ajanthan et "
       "al. 2025's optimizer for asynchronous pipelines), or Muon "
       "(orthogonalised momentum on weight matrices, AdamW on the "
       "rest; Jordan et al. 2024, scaled as Liu et al. 2025)"},
      {"lr", "optimizer.learning_rate", "RATE",
       absl::StrCat("sgd: 0.1 * B * K / 256; adamw: ", kAdamWLearningRatePer64,
                    " * B * K / 64"),
       "peak learning rate"},
      {"momentum", "optimizer.momentum", "M", "0.9 (muon: 0.95)",
       "SGD's and Muon's momentum, in [0, 1)"},
      {"nesterov", "optimizer.nesterov", "", "true when momentum > 0",
       "SGD and Muon: Nesterov momentum"},
      {"beta1", "optimizer.beta1", "B1", "0.9 (nadamw: 0.99)",
       "AdamW, NAdamW (and Muon's AdamW): first moment's decay, in "
       "[0, 1)"},
      {"beta2", "optimizer.beta2", "B2", "0.999 (recipe language_model: 0.95)",
       "AdamW, NAdamW (and Muon's AdamW): second moment's decay, in "
       "[0, 1)"},
      {"momentum-decay", "optimizer.momentum_decay", "PSI", "0.004",
       "NAdamW: the decay of beta1's warm-up, mu_t = beta1 (1 - 0.5 * "
       "0.96^(t PSI)), >= 0"},
      {"eps", "optimizer.eps", "E", "1e-8",
       "AdamW: added to the second moment's root, > 0"},
      {"weight-decay", "optimizer.weight_decay", "WD",
       "sgd: 5e-4 (recipe paper: 1e-4 on imagenet); adamw: 0.05",
       "weight decay (L2 with sgd, decoupled with adamw; never on "
       "normalisation weights, biases or position embeddings)"},
      {"clip-grad-norm", "optimizer.clip_grad_norm", "N", "0 (off)",
       "scale each stage's gradient down to L2 norm N before its step "
       "(per stage: PETRA never holds the whole network's gradient "
       "of one step)"},
      {"warmup-epochs", "schedule.warmup_epochs", "E",
       "0, or 5 from 10 epochs (recipe paper: 5, less on short runs; "
       "recipe transformer: 5, or a third of a shorter run)",
       "epochs of linear warm-up from 0"},
      {"delay-lr-power", "schedule.delay_lr_power", "P",
       "0 (off; recipe transformer: 1)",
       "each stage's rate times (1 + D)^-P, D its gradients' delay "
       "in optimizer steps (PipeMare's rescheduling), in [0, 4]"},
      {"delay-lr-anneal-epochs", "schedule.delay_lr_anneal_epochs", "E",
       "0 (P stays)", "epochs over which --delay-lr-power falls linearly to 0"},
      {"decay", "schedule.decay", "", "cosine (recipe paper: step)",
       "learning-rate decay after warm-up"},
      {"step-epochs", "schedule.step_epochs", "E1,E2,...",
       "none (recipe paper: the paper's, at the same fractions of the run)",
       "decay step: epochs where the rate drops"},
      {"step-factor", "schedule.step_factor", "F", "0.1",
       "decay step: factor per drop, in (0, 1]"}};
}

// The flags of evaluation, checkpoints, replicas and where the job runs.
std::vector<JobFlag> RunRows() {
  return {{"eval-every", "evaluation.every_epochs", "N", std::nullopt,
           "evaluate on the test split every N epochs (the pipeline "
           "drains for it; between, it stays full across epochs)"},
          {"eval-every-steps", "evaluation.every_steps", "N", "0",
           absl::StrCat("also evaluate every N optimizer steps inside "
                        "epochs (each drains the pipeline; at most ",
                        kMaxEvaluationsInsideEpochs,
                        " in a job): a finer accuracy-against-time "
                        "curve; 0: only at --eval-every")},
          {"eval-train", "evaluation.full_train_pass", "", "false",
           "also evaluate on the whole training split after each evaluation"},
          {"checkpoint-every", "checkpoint.every_epochs", "N", std::nullopt,
           "checkpoint every N epochs (0: at the end only; the pipeline "
           "drains for each); a crashed job resumes from its newest "
           "checkpoint"},
          {"resume-from", "checkpoint.resume_from_job", "JOB", "none",
           "continue job JOB from its newest usable checkpoint (same "
           "spec; more epochs allowed)"},
          {"replicas", "replicas", "R", std::nullopt,
           "copies of the pipeline, each fed every R-th micro-batch, "
           "their gradients averaged before each step (R x stages "
           "devices)"},
          {"priority", "priority", "P", std::nullopt,
           "place in a coordinator's queue: higher starts first, FIFO "
           "within one (-100..100; above 0 for admins only)"},
          {"seed", "seed", "N", std::nullopt, "seed of every random choice"},
          {"transport", "transport", "", std::nullopt,
           "what activations travel through between processes: auto "
           "(cuda_ipc between GPUs that can map each other's memory, "
           "shared memory where both ends share a host's /dev/shm, "
           "grpc_bulk elsewhere), grpc (bytes in the stream's messages), "
           "grpc_bulk (raw byte buffers on several connections), shm "
           "(refused for a link that cannot share memory) or cuda_ipc "
           "(device memory from GPU to GPU on one host; auto takes it "
           "where both GPUs can map each other's; docs/DATA_PLANE.md)"},
          {"devices", "devices", "D1,D2,...", "cpu",
           "device of every stage (one entry) or of each stage: cpu, cuda, "
           "cuda:N"}};
}

}  // namespace

void AddJobFlags(base::FlagSet& f, petra::v1::JobSpec* s,
                 const petra::v1::JobSpec& base) {
  // What a job gets for each flag left out: the base, then the defaults.
  petra::v1::JobSpec d = base;
  ApplyJobSpecDefaults(&d);
  petra::v1::JobSpec folder_job;  // what an image folder gets
  folder_job.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_IMAGE_FOLDER);
  ApplyJobSpecDefaults(&folder_job);
  const auto from_folder = [&folder_job](const char* path) {
    return SpecField::Find(path)->Show(folder_job);
  };
  const auto or_empty = [&d](bool given, const char* path) {
    return given ? SpecField::Find(path)->Show(d) : std::string();
  };
  AddRows(
      f, s, d,
      {{"name", "name", "STRING",
        base.name().empty() ? "the job id" : base.name(),
        "display name of the job"},
       {"arch", "model.architecture", "",
        or_empty(base.model().architecture() != 0, "model.architecture"),
        "network architecture"},
       {"variant", "model.variant", "",
        base.dataset().kind() ? SpecField::Find("model.variant")->Show(d)
                              : "implied by --dataset",
        "input geometry and stem"},
       {"width", "model.width", "W", std::nullopt,
        "channel width multiplier, in (0, 8]"},
       {"num-classes", "model.num_classes", "N",
        "the variant's; an image folder's: the classes in its train/ folder",
        "output classes"}});
  AddTransformerFlags(
      f, [s] { return s->mutable_model()->mutable_transformer(); });
  AddRows(
      f, s, d,
      {{"dataset", "dataset.kind", "",
        or_empty(base.dataset().kind() != 0, "dataset.kind"), "training data"},
       {"tokenizer", "dataset.text.tokenizer", "", "bytes",
        "text: bytes (every byte a token) or sentencepiece (a unigram "
        "model of --vocab pieces trained on the training split)"},
       {"data-path", "dataset.path", "DIR", "the dataset's standard directory",
        "dataset directory, relative to the data root"},
       {"train-limit", "dataset.train_limit", "N", "all",
        "use only N training examples"},
       {"test-limit", "dataset.test_limit", "N", "all",
        "use only N test examples"},
       {"corrupt-images", "dataset.image_folder.corrupt_images", "",
        from_folder("dataset.image_folder.corrupt_images"),
        "image_folder: a file that does not decode fails the job, or "
        "is skipped (replaced by the next, counted)"},
       {"random-resized-crop", "dataset.image_folder.random_resized_crop",
        "BOOL", from_folder("dataset.image_folder.random_resized_crop"),
        "image_folder: train on random resized crops (false: resize "
        "and centre crop, then the spec's padded crop and flips)"}});
  f.AddCustom("stages", "N|per-block", ShownStages(d.partition()),
              "number of pipeline stages, or one per residual block",
              [s](const std::string& v) -> absl::Status {
                if (v == "per-block" || v == "per_block") {
                  s->mutable_partition()->set_per_block(true);
                  return absl::OkStatus();
                }
                return Uint32([s](uint32_t n) {
                  s->mutable_partition()->set_stage_count(n);
                })(v);
              });
  for (const auto& rows :
       {PartitionAndNumericsRows(), ModeRows(), OptimizerRows(), RunRows()}) {
    AddRows(f, s, d, rows);
  }
}

void OverlayJobSpec(const petra::v1::JobSpec& overrides,
                    petra::v1::JobSpec* base) {
  // MergeFrom appends repeated fields; the flags mean "replace".
  if (overrides.devices_size() > 0) base->clear_devices();
  if (overrides.schedule().step_epochs_size() > 0) {
    base->mutable_schedule()->clear_step_epochs();
  }
  if (overrides.partition().layout_case() !=
      petra::v1::PartitionSpec::LAYOUT_NOT_SET) {
    base->mutable_partition()->clear_layout();
  }
  // Another architecture starts from its own sizes: a CNN's width means
  // nothing to a transformer and the other way round.
  if (overrides.model().architecture() != 0 &&
      overrides.model().architecture() != base->model().architecture()) {
    base->mutable_model()->clear_width();
    base->mutable_model()->clear_transformer();
    base->mutable_model()->clear_num_classes();
    // A language model reads text, an image model images: a base's data
    // of the other kind goes unless the flags name the data.
    const bool lm = catalog::IsLanguageModel(overrides.model().architecture());
    if (overrides.dataset().kind() == 0 &&
        lm != (base->dataset().kind() == petra::v1::DATASET_KIND_TEXT)) {
      base->clear_dataset();
      base->mutable_model()->clear_variant();
      base->mutable_dataset()->set_kind(
          lm ? petra::v1::DATASET_KIND_TEXT
             : petra::v1::DATASET_KIND_FASHION_MNIST);
    }
  }
  // Another mode starts from its own mode settings: those in the base (often
  // a resolved spec, the old mode's defaults filled in) would be refused
  // with it. What the flags set themselves is laid over them below.
  using petra::v1::TrainingMode;
  const TrainingMode mode = overrides.training().mode();
  if (mode != petra::v1::TRAINING_MODE_UNSPECIFIED &&
      mode != base->training().mode()) {
    petra::v1::TrainingSpec* t = base->mutable_training();
    t->clear_rebuild_with();
    if (mode != petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
      t->clear_forward_gradient();
    }
    if (mode != petra::v1::TRAINING_MODE_DELAYED) {
      t->clear_stash_inputs();
      t->clear_stash_weights();
    }
    if (mode != petra::v1::TRAINING_MODE_PIPELINE) {
      t->clear_pipeline_schedule();
      t->clear_recompute();
    }
    if (mode != petra::v1::TRAINING_MODE_PETRA &&
        mode != petra::v1::TRAINING_MODE_DELAYED) {
      t->clear_predict_weights();
      t->clear_spike_compensation();
      t->clear_delay_compensation();
      t->clear_discrepancy_correction();
    }
  }
  // Another optimizer starts from its own momentum settings: the old
  // one's, filled in, would be refused or wrong with it.
  if (overrides.optimizer().kind() != 0 &&
      overrides.optimizer().kind() != base->optimizer().kind()) {
    petra::v1::OptimizerSpec* o = base->mutable_optimizer();
    o->clear_momentum();
    o->clear_nesterov();
    o->clear_beta1();
    o->clear_beta2();
    o->clear_eps();
    o->clear_momentum_decay();
    // Its default follows the optimizer (none to predict with under muon).
    base->mutable_training()->clear_predict_weights();
  }
  base->MergeFrom(overrides);
}

absl::StatusOr<petra::v1::JobSpec> AssembleJobSpec(
    const petra::v1::JobSpec& base, const std::string& from_file,
    const petra::v1::JobSpec& overrides) {
  petra::v1::JobSpec spec = base;
  if (!from_file.empty()) {
    absl::StatusOr<petra::v1::JobSpec> file = ReadJobSpecFile(from_file);
    if (!file.ok()) return file.status();
    spec = std::move(*file);
  }
  // The base's name says which network and data it trains: once the flags
  // change either, it would mislabel the job, and the job id names it.
  const auto changes = [](int to, int from) { return to != 0 && to != from; };
  if (from_file.empty() && overrides.name().empty() &&
      (changes(overrides.model().architecture(), base.model().architecture()) ||
       changes(overrides.dataset().kind(), base.dataset().kind()))) {
    spec.clear_name();
  }
  OverlayJobSpec(overrides, &spec);
  return ResolveJobSpec(spec);
}

}  // namespace petra::job

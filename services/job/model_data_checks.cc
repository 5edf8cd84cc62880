// The model, its data, the partition and the devices of a job spec.
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
#include "services/base/utf8.h"
#include "services/catalog/architecture_catalog.h"
#include "services/catalog/device_name.h"
#include "services/job/enum_names.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_validation.h"
#include "services/job/spec_checks.h"

namespace petra::job::spec_checks {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::GetEnumDescriptor;

// revvit and vit are sized by model.transformer (resolved: every size set),
// the CNNs by width alone.
// The sizes every transformer's blocks share (revvit, vit, revlm, gpt).
void CheckBlockSizes(const petra::v1::TransformerSpec& t, Problems& p) {
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
}

// revlm and gpt: sized by model.transformer (seq_len and vocab too),
// trained on text and only on text.
void CheckLanguageModel(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::ModelSpec& m = s.model();
  const bool lm = catalog::IsLanguageModel(m.architecture());
  const bool text = s.dataset().kind() == petra::v1::DATASET_KIND_TEXT;
  if (text && !lm) {
    p.Add("dataset.kind", "text",
          "text trains a language model (--arch revlm or gpt), not " +
              EnumShortName(m.architecture()));
  }
  if (!text && s.dataset().has_text()) {
    p.Add("dataset.text", "set", "only for dataset kind text");
  }
  if (!lm) {
    if (m.transformer().tie_embeddings()) {
      p.Add("model.transformer.tie_embeddings", "true",
            "only a language model (revlm, gpt) has token embeddings to tie");
    }
    if (m.transformer().has_seq_len() || m.transformer().has_vocab()) {
      p.Add("model.transformer.seq_len", "set",
            "seq_len and vocab size a language model (revlm, gpt)");
    }
    return;
  }
  if (!text) {
    p.Add("model.architecture", EnumShortName(m.architecture()),
          absl::StrCat("a language model trains on text (--dataset text), "
                       "not ",
                       EnumShortName(s.dataset().kind())));
  }
  const petra::v1::TransformerSpec& t = m.transformer();
  if (m.width() != 1.0) {
    p.Add("model.width", Num(m.width()),
          "revlm and gpt are sized by model.transformer (--embed-dim, "
          "--depth, --heads, --mlp-ratio, --seq-len); width must be 1");
  }
  if (t.has_patch_size() ||
      t.stem() != petra::v1::TransformerSpec::STEM_UNSPECIFIED) {
    p.Add("model.transformer.patch_size", "set",
          "patches and stems are an image transformer's; a language model "
          "embeds tokens");
  }
  CheckBlockSizes(t, p);
  if (t.seq_len() < 1 || t.seq_len() > kMaxTokens) {
    p.Add("model.transformer.seq_len", t.seq_len(),
          absl::StrCat("must be in [1, ", kMaxTokens, "]"));
  }
  if (t.vocab() < 2 || t.vocab() > kMaxClasses) {
    p.Add("model.transformer.vocab", t.vocab(),
          absl::StrCat("must be in [2, ", kMaxClasses, "]"));
  } else if (text &&
             s.dataset().text().tokenizer() ==
                 petra::v1::TextSpec::TOKENIZER_BYTES &&
             t.vocab() != 256) {
    p.Add("model.transformer.vocab", t.vocab(),
          "the bytes tokenizer has 256 symbols");
  } else if (text &&
             s.dataset().text().tokenizer() ==
                 petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE &&
             t.vocab() <
                 catalog::LanguageModelDefaults::kSentencePieceMinVocab) {
    p.Add("model.transformer.vocab", t.vocab(),
          absl::StrCat("a SentencePiece tokenizer needs at least ",
                       catalog::LanguageModelDefaults::kSentencePieceMinVocab,
                       " pieces (its 256 byte pieces, <unk>, <s> and </s> "
                       "come first)"));
  }
  if (m.num_classes() != t.vocab()) {
    p.Add("model.num_classes", m.num_classes(),
          absl::StrCat("a language model's classes are its vocabulary (",
                       t.vocab(), ")"));
  }
  if (s.training().mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    p.Add("training.mode", "forward_gradient",
          "not for language models yet: their local heads are image "
          "classifiers");
  }
  const petra::v1::PartitionSpec& cut = s.partition();
  const bool one_stage =
      (cut.layout_case() == petra::v1::PartitionSpec::kStageCount &&
       cut.stage_count() == 1) ||
      (cut.layout_case() == petra::v1::PartitionSpec::kSplits &&
       cut.splits().split_at().empty());
  if (t.tie_embeddings() && !one_stage) {
    p.Add("model.transformer.tie_embeddings", "true",
          "the embedding (first stage) and the LM head (last stage) can share "
          "their weight only on one stage (--stages 1): PETRA updates each "
          "stage's weights on its own, so two stages cannot hold one tensor; "
          "leave --tie-embeddings out to train on more");
  }
}

void CheckTransformer(const petra::v1::ModelSpec& m, bool variant_ok,
                      Problems& p) {
  if (!catalog::IsTransformer(m.architecture())) {
    if (m.has_transformer() && !catalog::IsLanguageModel(m.architecture())) {
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
  CheckBlockSizes(t, p);
  const bool conv_stem = CheckEnum<petra::v1::TransformerSpec::Stem>(
                             p, "model.transformer.stem", t.stem(), true) &&
                         t.stem() == petra::v1::TransformerSpec::STEM_CONV;
  const int64_t side = catalog::InputShape(m.variant())[1];
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
             !catalog::ConvStemFits(side, t.patch_size())) {
    p.Add("model.transformer.patch_size", t.patch_size(),
          absl::StrCat("the conv stem's stride-2 convolutions take ", side,
                       " to ", catalog::ConvStemSide(side, t.patch_size()),
                       " tokens a side, not ", side / t.patch_size(),
                       "; use a power of two or --stem patch"));
  }
}

}  // namespace

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
  CheckLanguageModel(s, p);
  // Unset on an image folder: counted from its train/ folder where the
  // data is (data::FillFromData).
  const bool classes_from_folder =
      !m.has_num_classes() &&
      s.dataset().kind() == petra::v1::DATASET_KIND_IMAGE_FOLDER;
  if (!classes_from_folder &&
      (m.num_classes() < 2 || m.num_classes() > kMaxClasses)) {
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
  if (d.kind() == petra::v1::DATASET_KIND_TEXT) {
    CheckEnum<petra::v1::TextSpec::Tokenizer>(p, "dataset.text.tokenizer",
                                              d.text().tokenizer(), true);
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
      d.kind() != petra::v1::DATASET_KIND_SYNTHETIC &&
      d.kind() != petra::v1::DATASET_KIND_TEXT) {
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
  for (const auto& [field, size] :
       {std::pair<const char*, uint64_t>{"dataset.synthetic_train_size",
                                         d.synthetic_train_size()},
        {"dataset.synthetic_test_size", d.synthetic_test_size()}}) {
    if (size < 1 || size > kMaxSyntheticSamples) {
      p.Add(field, size,
            absl::StrCat("must be 1 to ", kMaxSyntheticSamples,
                         " (a synthetic set is made in memory)"));
    }
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
  absl::StatusOr<catalog::ArchitectureInfo> arch =
      catalog::GetArchitectureInfo(s.model());
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
    absl::StatusOr<catalog::DeviceName> dev = catalog::ParseDeviceName(
        s.devices(i), absl::StrCat("devices[", i, "]"));
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

}  // namespace petra::job::spec_checks

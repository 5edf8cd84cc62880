#include "services/catalog/architecture_catalog.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace petra::catalog {

std::vector<int64_t> InputShape(petra::v1::Variant variant) {
  switch (variant) {
    case petra::v1::VARIANT_IMAGENET:
      return {3, 224, 224};
    case petra::v1::VARIANT_MNIST:
      return {1, 28, 28};
    default:
      return {3, 32, 32};
  }
}

uint32_t DefaultPatchSize(petra::v1::Variant variant) {
  switch (variant) {
    case petra::v1::VARIANT_IMAGENET:
      return 16;
    case petra::v1::VARIANT_MNIST:
      return 7;
    default:
      return 4;
  }
}

namespace {

// ceil(log2 patch_size): the stride-2 convolutions of a convolutional stem.
int ConvStemDepth(int64_t patch_size) {
  int n = 0;
  while ((int64_t{1} << n) < patch_size) ++n;
  return n;
}

}  // namespace

std::vector<int64_t> ConvStemWidths(int64_t patch_size, int64_t embed_dim) {
  const int n = ConvStemDepth(patch_size);
  std::vector<int64_t> widths;
  for (int i = 0; i < n; ++i) {
    widths.push_back(
        std::min<int64_t>(embed_dim, int64_t{32} << std::min(i, 40)));
  }
  return widths;
}

int64_t ConvStemSide(int64_t side, int64_t patch_size) {
  for (int i = 0; i < ConvStemDepth(patch_size); ++i) side = (side + 1) / 2;
  return side;
}

bool ConvStemFits(int64_t side, int64_t patch_size) {
  return patch_size >= 1 && side % patch_size == 0 &&
         ConvStemSide(side, patch_size) == side / patch_size;
}

bool IsTransformer(int architecture) {
  return architecture == petra::v1::ARCHITECTURE_REVVIT ||
         architecture == petra::v1::ARCHITECTURE_VIT;
}

bool IsLanguageModel(int architecture) {
  return architecture == petra::v1::ARCHITECTURE_REVLM ||
         architecture == petra::v1::ARCHITECTURE_GPT;
}

std::string DescribeSize(const petra::v1::ModelSpec& m) {
  if (IsLanguageModel(m.architecture())) {
    const petra::v1::TransformerSpec& t = m.transformer();
    return absl::StrFormat(
        "embed_dim %d, depth %d, heads %d, mlp_ratio %g, seq_len %d, vocab %d",
        t.embed_dim(), t.depth(), t.heads(), t.mlp_ratio(), t.seq_len(),
        t.vocab());
  }
  if (!IsTransformer(m.architecture())) {
    return absl::StrFormat("width %g", m.width());
  }
  const petra::v1::TransformerSpec& t = m.transformer();
  return absl::StrFormat(
      "embed_dim %d, depth %d, heads %d, mlp_ratio %g, patch_size %d, stem %s",
      t.embed_dim(), t.depth(), t.heads(), t.mlp_ratio(), t.patch_size(),
      t.stem() == petra::v1::TransformerSpec::STEM_PATCH ? "patch" : "conv");
}

absl::StatusOr<ArchitectureInfo> GetArchitectureInfo(
    const petra::v1::ModelSpec& model) {
  const int architecture = model.architecture();
  if (IsLanguageModel(architecture)) {
    const int depth = static_cast<int>(std::min<uint32_t>(
        model.transformer().has_depth() ? model.transformer().depth()
                                        : LanguageModelDefaults::kDepth,
        1u << 20));
    const bool rev = architecture == petra::v1::ARCHITECTURE_REVLM;
    return ArchitectureInfo{rev ? "RevLM" : "GPT", rev, depth, depth + 2};
  }
  if (IsTransformer(architecture)) {
    // Bounded so that the count cannot overflow; validation refuses depths
    // above its own (much lower) limit.
    const int depth = static_cast<int>(std::min<uint32_t>(
        model.transformer().has_depth() ? model.transformer().depth()
                                        : TransformerDefaults::kDepth,
        1u << 20));
    const bool rev = architecture == petra::v1::ARCHITECTURE_REVVIT;
    return ArchitectureInfo{rev ? "RevViT" : "ViT", rev, depth, depth + 2};
  }
  // Block counts follow the ResNet paper: 18 = [2,2,2,2] basic blocks,
  // 34 = [3,4,6,3] basic, 50 = [3,4,6,3] bottleneck, 101 = [3,4,23,3]
  // bottleneck.
  switch (architecture) {
    case petra::v1::ARCHITECTURE_REVNET18:
      return ArchitectureInfo{"RevNet18", true, 8, 10};
    case petra::v1::ARCHITECTURE_REVNET34:
      return ArchitectureInfo{"RevNet34", true, 16, 18};
    case petra::v1::ARCHITECTURE_REVNET50:
      return ArchitectureInfo{"RevNet50", true, 16, 18};
    case petra::v1::ARCHITECTURE_REVNET101:
      return ArchitectureInfo{"RevNet101", true, 33, 35};
    case petra::v1::ARCHITECTURE_IREVNET18:
      return ArchitectureInfo{"i-RevNet18", true, 8, 10};
    case petra::v1::ARCHITECTURE_RESNET18:
      return ArchitectureInfo{"ResNet18", false, 8, 10};
    case petra::v1::ARCHITECTURE_RESNET34:
      return ArchitectureInfo{"ResNet34", false, 16, 18};
    case petra::v1::ARCHITECTURE_RESNET50:
      return ArchitectureInfo{"ResNet50", false, 16, 18};
    case petra::v1::ARCHITECTURE_RESNET101:
      return ArchitectureInfo{"ResNet101", false, 33, 35};
    case petra::v1::ARCHITECTURE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          "model.architecture: required (one of revnet18, revnet34, revnet50, "
          "revnet101, irevnet18, resnet18, resnet34, resnet50, resnet101, "
          "revvit, vit, revlm, gpt)");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("model.architecture: unknown value ", architecture));
  }
}

}  // namespace petra::catalog

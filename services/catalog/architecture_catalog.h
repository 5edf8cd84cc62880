// Facts about each architecture that planning and validation need without
// building the network (no torch here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::catalog {

struct ArchitectureInfo {
  // Display name, e.g. "RevNet18".
  std::string display_name;
  // Whether the residual blocks are reversible couplings.
  bool reversible = false;
  // Residual blocks, not counting stem and head.
  int residual_blocks = 0;
  // Stages of the per-block partition: stem + residual blocks + head.
  int per_block_stages = 0;
};

// The transformer sizes a spec leaves unset (the job defaults fill them in).
struct TransformerDefaults {
  static constexpr uint32_t kEmbedDim = 64;
  static constexpr uint32_t kDepth = 6;
  static constexpr uint32_t kHeads = 4;
  static constexpr double kMlpRatio = 2.0;
  // The patch side depends on the input: DefaultPatchSize.
};

// The patch side a transformer gets when its spec leaves it unset: 7 for
// 28x28 inputs (mnist: 16 tokens), 4 for 32x32 (cifar: 64), ViT-B/16's 16
// for 224x224 (imagenet: 196). On Fashion-MNIST 16 tokens train 3 times
// faster than 49 and reach more in one epoch (docs/BENCHMARKS.md, "The
// first run of a transformer user").
uint32_t DefaultPatchSize(petra::v1::Variant variant);

// The widths of a convolutional stem's stride-2 3x3 convolutions
// (TransformerSpec.STEM_CONV) for patches of `patch_size`: ceil(log2
// patch_size) of them, doubling from 32 and at most embed_dim. On
// Fashion-MNIST 32, 64, 64 reached a point more than ViTc's 16, 32, 64 (an
// eighth of the embedding first) in one epoch; from 32 rather than a
// fraction of the embedding, ViT-B's stem (32 to 256) costs a sixth of a
// block, not several. Empty for patches of 1.
std::vector<int64_t> ConvStemWidths(int64_t patch_size, int64_t embed_dim);

// Whether those convolutions, halving the side each time (rounding up),
// give the patchify stem's side / patch_size tokens a side; they do for
// every patch that divides 28 or 32, not for 7 on 224 (32 tokens a side).
bool ConvStemFits(int64_t side, int64_t patch_size);
// The side those convolutions leave of an input `side` wide.
int64_t ConvStemSide(int64_t side, int64_t patch_size);

// One sample's input shape {channels, height, width} for a variant.
std::vector<int64_t> InputShape(petra::v1::Variant variant);

// revvit and vit: sized by model.transformer, not by width.
bool IsTransformer(int architecture);
// revlm and gpt: causal language models over tokens, sized by
// model.transformer (its seq_len and vocab too), not by width or variant.
bool IsLanguageModel(int architecture);

// The language-model sizes a spec leaves unset. Small enough that `petra
// train --arch revlm` trains at some thousands of tokens a second on two
// cores.
struct LanguageModelDefaults {
  static constexpr uint32_t kEmbedDim = 128;
  static constexpr uint32_t kDepth = 4;
  static constexpr uint32_t kHeads = 4;
  static constexpr double kMlpRatio = 4.0;
  static constexpr uint32_t kSeqLen = 128;
  // The bytes tokenizer's.
  static constexpr uint32_t kVocab = 256;
  // A SentencePiece tokenizer's pieces: SentencePiece's own default.
  static constexpr uint32_t kSentencePieceVocab = 8000;
  // Its byte pieces and <unk>, <s>, </s>: the fewest pieces it can have.
  static constexpr uint32_t kSentencePieceMinVocab = 259 + 1;
};

// What sizes a resolved model, for people: "width 0.25" for a CNN,
// "embed_dim 64, depth 6, heads 4, mlp_ratio 2, patch_size 7, stem conv"
// for a transformer.
std::string DescribeSize(const petra::v1::ModelSpec& model);

// NOT_FOUND-free: INVALID_ARGUMENT for ARCHITECTURE_UNSPECIFIED and unknown
// values, naming model.architecture. A transformer's block count is its
// depth (the default depth when unset).
absl::StatusOr<ArchitectureInfo> GetArchitectureInfo(
    const petra::v1::ModelSpec& model);

}  // namespace petra::catalog

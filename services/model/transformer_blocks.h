// The blocks of the vision transformers (revvit, vit): a patch embedding as
// the stem, a reversible block over two token streams and its
// non-reversible twin, and a head over tokens. Tokens are [batch, tokens,
// embed_dim]. Only a convolutional stem has BatchNorm; the blocks use
// LayerNorm, which has no running statistics.
#pragma once

#include <torch/torch.h>

#include "services/model/blocks.h"
#include "services/model/reversible_block.h"

namespace petra::model {

struct TransformerOptions {
  int64_t in_channels = 1;
  int64_t image_side = 28;
  int64_t embed_dim = 64;
  int64_t heads = 4;
  int64_t mlp_hidden = 128;
  int64_t patch_size = 4;
  // TransformerSpec.STEM_CONV: stride-2 convolutions (ConvStemWidths), then
  // a 1x1 convolution, instead of one patch_size-strided convolution.
  bool conv_stem = false;
  // A language model's: a token attends to itself and those before it.
  bool causal = false;
};

// F: LayerNorm -> multi-head self-attention (causal: masked so that no
// token sees a later one).
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads, bool causal = false);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_;
  bool causal_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear proj_{nullptr};
};
TORCH_MODULE(Attention);

// G: LayerNorm -> Linear -> GELU -> Linear.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};
TORCH_MODULE(Mlp);

// Image -> tokens: a patch_size-strided convolution (or a convolutional
// stem, TransformerOptions.conv_stem) and a learned position embedding; a
// reversible network gets the tokens on both streams.
class PatchEmbedBlock : public Block {
 public:
  PatchEmbedBlock(const TransformerOptions& o, bool two_streams);
  std::string kind() const override { return "stem"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  TransformerOptions options_;
  bool two_streams_;
  std::vector<ConvBn> convs_;  // registered as "convs" (a ModuleList)
  torch::nn::Conv2d patch_{nullptr};
  torch::Tensor position_;
};

// RevViT's block: (X1, X2) -> (Y1, Y2) with Y1 = X1 + F(X2) and
// Y2 = X2 + G(Y1); inverse X2 = Y2 - G(Y1), X1 = Y1 - F(X2).
class RevViTBlock : public ReversibleBlock {
 public:
  explicit RevViTBlock(const TransformerOptions& o);
  std::string kind() const override { return "reversible"; }
  TensorPair Forward(const TensorPair& x) override;
  TensorPair Inverse(const TensorPair& y) override;
  std::unique_ptr<PendingVjp> Rebuild(const TensorPair& y) override;

 private:
  class Pending;
  Attention f_{nullptr};
  Mlp g_{nullptr};
};

// The non-reversible baseline: x + F(x), then + G(.), on one stream.
class ViTBlock : public Block {
 public:
  explicit ViTBlock(const TransformerOptions& o);
  std::string kind() const override { return "residual"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  Attention f_{nullptr};
  Mlp g_{nullptr};
};

// Concatenates the streams (when two), LayerNorm, mean over the tokens and
// a linear classifier.
class TokenHeadBlock : public Block {
 public:
  TokenHeadBlock(int64_t features, int64_t classes);
  std::string kind() const override { return "head"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

// A language model's stem: tokens (int64 [batch, tokens], at most
// max_tokens) -> their embeddings plus a learned position embedding; a
// reversible network gets them on both streams.
class TokenEmbedBlock : public Block {
 public:
  TokenEmbedBlock(int64_t vocab, int64_t max_tokens, int64_t dim,
                  bool two_streams);
  std::string kind() const override { return "stem"; }
  TensorPair Forward(const TensorPair& x) override;
  // The token embedding [vocab, dim], which a tied head reads.
  const torch::Tensor& token_weight() const { return embedding_->weight; }

 private:
  bool two_streams_;
  torch::nn::Embedding embedding_{nullptr};
  torch::Tensor position_;
};

// A language model's head: concatenates the streams (when two), LayerNorm,
// and a linear map of every position to the vocabulary's logits
// [batch, tokens, vocab].
//
// Tied (dim > 0): no weight of its own; the logits are the normalised
// streams' sum times the token embedding [vocab, dim] transposed, which
// Tie() hands it when one stage builds both (BuildBlocks). Built alone (to
// count or profile it), it reads a stand-in of that shape, not a parameter.
class LmHeadBlock : public Block {
 public:
  LmHeadBlock(int64_t features, int64_t vocab, int64_t tied_dim = 0);
  std::string kind() const override { return "head"; }
  TensorPair Forward(const TensorPair& x) override;
  bool tied() const { return tied_weight_.defined(); }
  void Tie(const torch::Tensor& token_weight) { tied_weight_ = token_weight; }

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear fc_{nullptr};
  torch::Tensor tied_weight_;
};

}  // namespace petra::model

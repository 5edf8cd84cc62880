// A network is a list of blocks; a stage is a run of consecutive blocks. A
// block is a Forward; reversible blocks (reversible_block.h) add their
// Inverse and the backward step that rebuilds the input. The blocks here
// are not reversible: a stage keeps their input and recomputes them.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "services/model/layers.h"
#include "services/model/tensor_pair.h"

namespace petra::model {

class Block : public torch::nn::Module {
 public:
  // "stem", "reversible", "downsample", "residual", "head".
  virtual std::string kind() const = 0;
  // True exactly for a ReversibleBlock (reversible_block.h), which the
  // engine then treats as one.
  bool reversible() const;
  virtual TensorPair Forward(const TensorPair& x) = 0;
  // TakesWeightDecay of each parameter, in parameters()' order.
  std::vector<bool> weight_decay_mask() const;
};

// The name a transformer's position embedding is registered under.
inline constexpr char kPositionEmbeddingName[] = "position";
// The submodule of a token embedding (a language model's stem).
inline constexpr char kTokenEmbeddingName[] = "embedding";

// Whether weight decay applies to the parameter `name` (a module path such
// as "attention.qkv.weight"): convolution and linear weights take it;
// normalisation weights and biases (one dimension) and position embeddings
// do not (as timm and DeiT train transformers), whatever the optimizer.
bool TakesWeightDecay(const std::string& name, const torch::Tensor& param);

// conv - BN - ReLU (- max-pool); a RevNet stem splits its 2c output
// channels into the two streams (a, b).
struct StemOptions {
  int64_t in_channels = 3;
  int64_t out_channels = 64;  // total, both streams
  bool imagenet = false;      // 7x7 stride-2 conv and max-pool
  bool split = false;         // RevNet: output the pair
};

class StemBlock : public Block {
 public:
  explicit StemBlock(const StemOptions& options);
  std::string kind() const override { return "stem"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  StemOptions options_;
  ConvBn conv_{nullptr};
};

// A RevNet block that changes resolution or width (not invertible):
// (a, b) -> (R(a) + P(b), P'(a)) with strided 1x1 projections. Basic-block
// RevNets share P' = P; bottleneck RevNets give each stream its own. This is
// the reading that reproduces the paper's parameter counts for RevNet18, 34
// and 50 alike.
class RevDownsampleBlock : public Block {
 public:
  RevDownsampleBlock(const ResidualOptions& r, bool separate_projections);
  std::string kind() const override { return "downsample"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  ResidualFunction residual_{nullptr};
  ConvBn project_b_{nullptr};
  ConvBn project_a_{nullptr};  // null when shared
};

// A ResNet block: relu(R(x) + shortcut(x)).
class ResidualBlock : public Block {
 public:
  explicit ResidualBlock(const ResidualOptions& r);
  std::string kind() const override { return "residual"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  ResidualFunction residual_{nullptr};
  ConvBn shortcut_{nullptr};  // null for identity
};

// Global average pool and a linear classifier; a pair is concatenated first.
class HeadBlock : public Block {
 public:
  HeadBlock(int64_t in_features, int64_t classes);
  std::string kind() const override { return "head"; }
  TensorPair Forward(const TensorPair& x) override;

 private:
  torch::nn::Linear fc_{nullptr};
};

}  // namespace petra::model

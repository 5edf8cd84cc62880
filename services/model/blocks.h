// A network is a list of blocks; a stage is a run of consecutive blocks. A
// block is two functions: Forward, and (for reversible blocks) Inverse.
#pragma once

#include <torch/torch.h>

#include <string>

#include "services/model/layers.h"
#include "services/model/tensor_pair.h"

namespace petra::model {

class Block : public torch::nn::Module {
 public:
  // "stem", "reversible", "downsample", "residual", "head".
  virtual std::string kind() const = 0;
  virtual bool reversible() const { return false; }
  virtual TensorPair Forward(const TensorPair& x) = 0;
  // Rebuilds the input from the output. Only reversible blocks have one.
  virtual TensorPair Inverse(const TensorPair& y);
};

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

// The reversible coupling (a, b) -> (S(b) + R(a), S(a)); inverse
// a = S^-1(y2), b = S^-1(y1 - R(a)). S squeezes s x s pixels into s^2 x the
// channels (i-RevNet's invertible downsampling) when R has stride s > 1,
// and is the identity otherwise: (a, b) -> (b + R(a), a).
class ReversibleBlock : public Block {
 public:
  explicit ReversibleBlock(const ResidualOptions& r);
  std::string kind() const override { return "reversible"; }
  bool reversible() const override { return true; }
  TensorPair Forward(const TensorPair& x) override;
  TensorPair Inverse(const TensorPair& y) override;
  // The residual function, for the engine's one-VJP backward.
  ResidualFunction& residual() { return residual_; }
  // S and S^-1; S is a permutation, so S^-1 is also its transpose (what
  // the engine applies to gradients).
  torch::Tensor Squeeze(const torch::Tensor& x) const;
  torch::Tensor Unsqueeze(const torch::Tensor& x) const;

 private:
  ResidualFunction residual_{nullptr};
  int64_t squeeze_ = 1;
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

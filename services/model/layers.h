// The layers blocks are made of: convolution + BatchNorm (+ ReLU), and the
// residual functions of basic and bottleneck blocks.
#pragma once

#include <torch/torch.h>

#include "services/model/batch_norm.h"

namespace petra::model {

// Counts forward FLOPs (multiply-adds x 2) of the convolutions and linear
// layers run on this thread while it lives, and apart the elements written
// by the memory-bound layers between them (normalisations, activations,
// softmax): those cost time out of proportion to their FLOPs, on a CPU as
// on a GPU, and a partition balanced by FLOPs alone under-weights them.
class ScopedFlopCounter {
 public:
  ScopedFlopCounter();
  ~ScopedFlopCounter();
  int64_t flops() const { return flops_; }
  int64_t elementwise() const { return elementwise_; }
  static void Add(int64_t flops);  // no-op when no counter is active
  static void AddElementwise(int64_t elements);

 private:
  ScopedFlopCounter* previous_;
  int64_t flops_ = 0;
  int64_t elementwise_ = 0;
};

struct ConvBnOptions {
  int64_t in = 0, out = 0, kernel = 3, stride = 1;
  bool relu = true;
};

// conv (no bias) -> BatchNorm -> optional ReLU.
class ConvBnImpl : public torch::nn::Module {
 public:
  explicit ConvBnImpl(const ConvBnOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  ConvBnOptions options_;
  torch::nn::Conv2d conv_{nullptr};
  BatchNorm2d bn_{nullptr};
};
TORCH_MODULE(ConvBn);

// A residual function without its skip connection.
//  basic:      conv3x3(stride) - BN - ReLU - conv3x3 - BN [- ReLU]
//  bottleneck: conv1x1 - BN - ReLU - conv3x3(stride) - BN - ReLU - conv1x1
//              - BN [- ReLU]
// The final ReLU is on for RevNet couplings (R has no skip of its own) and
// off for ResNet blocks (the ReLU follows the addition).
struct ResidualOptions {
  bool bottleneck = false;
  int64_t in = 0;     // input channels
  int64_t width = 0;  // inner width (basic: = out)
  int64_t out = 0;    // output channels
  int64_t stride = 1;
  bool final_relu = true;
};

class ResidualFunctionImpl : public torch::nn::Module {
 public:
  explicit ResidualFunctionImpl(const ResidualOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential body_;
};
TORCH_MODULE(ResidualFunction);

// Linear layer that reports its FLOPs.
torch::Tensor CountedLinear(torch::nn::Linear& linear, const torch::Tensor& x);

}  // namespace petra::model

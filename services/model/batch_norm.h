// BatchNorm whose running statistics are updated only when the engine says
// so. PETRA normalises with batch statistics in forward without touching
// the running statistics, updates them during the backward rebuild or
// recompute, and evaluates with them (DESIGN.md §1).
#pragma once

#include <torch/torch.h>

namespace petra::model {

enum class BnMode {
  // Batch statistics; running statistics untouched (training forward).
  kBatchStats,
  // Batch statistics, and the running statistics are updated (the backward
  // rebuild/recompute).
  kBatchStatsUpdateRunning,
  // Running statistics (evaluation).
  kRunningStats,
};

// The mode BatchNorm layers use on this thread. Each stage runs on its own
// thread, so a thread-local mode needs no plumbing through every module.
BnMode CurrentBnMode();

// Sets the mode for the current thread until destroyed.
class ScopedBnMode {
 public:
  explicit ScopedBnMode(BnMode mode);
  ~ScopedBnMode();
  ScopedBnMode(const ScopedBnMode&) = delete;
  ScopedBnMode& operator=(const ScopedBnMode&) = delete;

 private:
  BnMode previous_;
};

class BatchNorm2dImpl : public torch::nn::Module {
 public:
  explicit BatchNorm2dImpl(int64_t channels, double momentum = 0.1,
                           double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias, running_mean, running_var;

 private:
  double momentum_, eps_;
};
TORCH_MODULE(BatchNorm2d);

}  // namespace petra::model

#include "services/model/batch_norm.h"

#include "services/model/precision.h"

namespace petra::model {
namespace {
thread_local BnMode current_mode = BnMode::kBatchStats;
}  // namespace

BnMode CurrentBnMode() { return current_mode; }

ScopedBnMode::ScopedBnMode(BnMode mode) : previous_(current_mode) {
  current_mode = mode;
}
ScopedBnMode::~ScopedBnMode() { current_mode = previous_; }

BatchNorm2dImpl::BatchNorm2dImpl(int64_t channels, double momentum, double eps)
    : momentum_(momentum), eps_(eps) {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
}

torch::Tensor BatchNorm2dImpl::forward(const torch::Tensor& input) {
  // Under bf16 autocast (training.precision) a convolution hands over bf16.
  // cuDNN normalises bf16 against fp32 weights and statistics itself; on
  // the CPU the statistics are computed from an fp32 copy, so that they
  // (and the running ones) are fp32's, not bf16's.
  const torch::Tensor x = input.is_cuda() ? input : ToFullPrecision(input);
  switch (CurrentBnMode()) {
    case BnMode::kRunningStats:
      return torch::batch_norm(x, weight, bias, running_mean, running_var,
                               /*training=*/false, momentum_, eps_,
                               /*cudnn_enabled=*/true);
    case BnMode::kBatchStatsUpdateRunning:
      return torch::batch_norm(x, weight, bias, running_mean, running_var,
                               /*training=*/true, momentum_, eps_, true);
    case BnMode::kBatchStats:
    default:
      // Undefined running tensors: batch statistics, nothing updated.
      return torch::batch_norm(x, weight, bias, torch::Tensor(),
                               torch::Tensor(), /*training=*/true, momentum_,
                               eps_, true);
  }
}

}  // namespace petra::model

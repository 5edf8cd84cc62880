// StageWorker's end of a training pass with replicas: the weights checked
// identical across replicas, the BN statistics averaged.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/engine/replica_group.h"
#include "services/engine/stage_worker.h"
#include "services/engine/torch_guard.h"

namespace petra::engine {
namespace {

// FNV-1a over the bytes of every tensor, in order: any changed bit changes
// it (no tolerance: replicas apply the same update to the same weights).
// Kept to 62 bits, so that it and its negation fit Agree's int64.
int64_t WeightChecksum(const std::vector<torch::Tensor>& tensors) {
  uint64_t h = 1469598103934665603ULL;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor host = t.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
    for (size_t i = 0, n = host.nbytes(); i < n; ++i) {
      h = (h ^ bytes[i]) * 1099511628211ULL;
    }
  }
  return static_cast<int64_t>(h >> 2);
}

}  // namespace

absl::Status StageWorker::SettleReplicas() {
  GradientAverager* group = optimizer_.averager();
  if (group == nullptr || group->replicas() < 2) return absl::OkStatus();
  return Guard(config_.index, "settling the replicas", [&]() -> absl::Status {
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> params = blocks_.parameters();
    const int64_t mine = WeightChecksum(params);
    if (!group->Agree(mine)) {
      ++replica_mismatches_;
      return absl::FailedPreconditionError(absl::StrFormat(
          "the replicas of stage %d hold different weights (replica %d's "
          "checksum is %016x): they fell out of step",
          config_.index, group->rank(), mine));
    }
    // Floating-point buffers only: BN's step counter stays each one's.
    std::vector<torch::Tensor> stats;
    for (const auto& b : blocks_.blocks()) {
      for (const torch::Tensor& t : b->buffers()) {
        if (t.is_floating_point()) stats.push_back(t);
      }
    }
    group->Average(stats);
    return absl::OkStatus();
  });
}

}  // namespace petra::engine

// NaN and Inf at a stage boundary (training.non_finite): each tensor that
// comes in or goes out is checked with one isfinite().all() reduction. With
// the skip policy the answer decides what the stage does next, so it is
// read at once. With the fail policy nothing waits for it: the reduction is
// queued on the tensor's device and read late (Settle), so a stage on a GPU
// queues its next micro-batch's kernels before it waits for this one's.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "petra/v1/job.pb.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

class NonFiniteCheck {
 public:
  NonFiniteCheck(int stage, petra::v1::TrainingSpec::NonFinitePolicy policy)
      : stage_(stage), policy_(policy) {}

  // The skip policy: a bad micro-batch is skipped, not fatal.
  bool skips() const {
    return policy_ ==
           petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH;
  }
  // Skip policy: OK, with `*skip` set when an element of `t` is NaN or Inf
  // (read now). Fail policy: OK, the check queued for Settle.
  absl::Status Check(const model::TensorPair& t, uint64_t id, const char* what,
                     bool* skip);
  // Reads the queued checks but the newest `keep` (the caller's own, whose
  // kernels may still run), in one transfer: the oldest that found NaN or
  // Inf gives FAILED_PRECONDITION naming the stage, its micro-batch and
  // its tensor, and every read check is dropped.
  absl::Status Settle(size_t keep = 0);
  // Checks queued and not yet read.
  size_t pending() const { return pending_.size(); }

 private:
  struct Queued {
    torch::Tensor finite;  // a bool scalar on the tensor's device
    uint64_t id;
    const char* what;
  };
  absl::Status Failure(uint64_t id, const char* what) const;

  const int stage_;
  const petra::v1::TrainingSpec::NonFinitePolicy policy_;
  std::vector<Queued> pending_;
};

model::TensorPair ZerosLike(const model::TensorPair& p);

}  // namespace petra::engine

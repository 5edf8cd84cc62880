// NaN and Inf at a stage boundary (training.non_finite): each tensor that
// comes in or goes out is checked with one isfinite().all() reduction.
#pragma once

#include <cstdint>

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
  // OK when every element of `t` is finite. Otherwise FAILED_PRECONDITION
  // naming the stage, micro-batch `id` and `what` (fail policy), or OK with
  // `*skip` set (skip policy).
  absl::Status Check(const model::TensorPair& t, uint64_t id, const char* what,
                     bool* skip) const;

 private:
  const int stage_;
  const petra::v1::TrainingSpec::NonFinitePolicy policy_;
};

model::TensorPair ZerosLike(const model::TensorPair& p);

}  // namespace petra::engine

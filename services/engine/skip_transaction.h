// One micro-batch's parameter update under training.non_finite, written once
// for both steps that update (a stage's backward and the loss stage's
// step). With the skip policy the parameter gradients are held while the
// step runs; then the gradient the step sends down is checked, and the
// micro-batch is either committed, or dropped with that gradient zeroed and
// counted as skipped. A step that leaves before Finish (an error) drops.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "services/engine/non_finite.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

class GradientAccumulator;

class SkipTransaction {
 public:
  // Holds `optimizer`'s gradients under the skip policy; `skipped` counts
  // the micro-batches Finish skips.
  SkipTransaction(NonFiniteCheck& finite, GradientAccumulator& optimizer,
                  int64_t* skipped);
  ~SkipTransaction();
  SkipTransaction(const SkipTransaction&) = delete;
  SkipTransaction& operator=(const SkipTransaction&) = delete;

  // Whether the micro-batch is skipped: `known_bad` (the step found NaN or
  // Inf itself, in its loss) or NaN/Inf in `*input_grad` under the skip
  // policy. Skipped: its gradients are dropped and `*input_grad` zeroed;
  // else they are committed. The fail policy's error drops them.
  absl::StatusOr<bool> Finish(uint64_t id, model::TensorPair* input_grad,
                              bool known_bad = false);

 private:
  NonFiniteCheck& finite_;
  GradientAccumulator& optimizer_;
  int64_t* const skipped_;
  bool finished_ = false;
};

}  // namespace petra::engine

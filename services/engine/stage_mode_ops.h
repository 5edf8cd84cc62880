// A training mode as the stage loop sees it: what a stage's forward sends
// up, and what its loss step and its backward send down. One strategy per
// way of training (backpropagated gradients: backprop, delayed, PETRA; or
// forward gradients), chosen once, when the stage's worker is built at
// Assign: the loop (stage_loop.cc) never asks which mode runs.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "services/engine/stage_io.h"

namespace petra::engine {

class ModeOps {
 public:
  virtual ~ModeOps() = default;
  // A forward going up (not on the last stage): what the next stage gets.
  virtual absl::StatusOr<ForwardItem> Forward(StageWorker& w, ForwardItem& in,
                                              int64_t tick) const = 0;
  // What the loss step of micro-batch `m` sends down (not on stage 0).
  virtual BackwardItem LossDown(const StageWorker& w, int64_t m,
                                LossOutput& out) const = 0;
  // A backward of what came down, `in`.
  virtual absl::StatusOr<BackwardOutput> Backward(StageWorker& w,
                                                  BackwardItem& in,
                                                  int64_t tick) const = 0;
  // The samples that backward counted, for monitoring.
  virtual int64_t Samples(const BackwardItem& in,
                          const BackwardOutput& out) const = 0;
  // What that backward sends down (not on stage 0).
  virtual BackwardItem Down(int64_t m, BackwardItem& in,
                            BackwardOutput& out) const = 0;
};

// The strategy of a mode (engine::PlanMode's `forward_gradient`).
const ModeOps& ModeOpsFor(bool forward_gradient);

}  // namespace petra::engine

// Which micro-batch a stage forwards and backwards at each tick. Fixed by
// the stage's position alone, so any runner (threads in one process, or
// servers over gRPC) that follows it performs the same operations in the
// same order and gets the same numbers.
#pragma once

#include <cstdint>

namespace petra::engine {

// PETRA and delayed gradients: at tick t, stage j (0-based) of J forwards
// micro-batch t - j and backwards micro-batch t - (2J - 2 - j); forward
// first. The last stage does both for the same micro-batch. In steady state
// a micro-batch's backward comes 2(J - 1 - j) ticks after its forward.
struct PipelineSchedule {
  int stage = 0;
  int stages = 1;
  int64_t micro_batches = 0;

  int64_t ticks() const { return micro_batches + 2 * stages - 2; }
  // -1 when the stage has no forward / backward at this tick.
  int64_t ForwardAt(int64_t tick) const {
    const int64_t m = tick - stage;
    return m >= 0 && m < micro_batches ? m : -1;
  }
  int64_t BackwardAt(int64_t tick) const {
    const int64_t m = tick - (2 * stages - 2 - stage);
    return m >= 0 && m < micro_batches ? m : -1;
  }
};

}  // namespace petra::engine

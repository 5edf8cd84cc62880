// Which micro-batch a stage forwards and backwards, in what order, under each
// schedule. The one definition: the stage loop (in-process runner and stage
// server alike) and the simulator behind `petra simulate` both read it, so
// the simulator follows the runtime by construction. Fixed by the stage's
// position alone, so any runner that follows it performs the same
// operations in the same order and gets the same numbers. No torch here.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "petra/v1/job.pb.h"

namespace petra::schedule {

enum class ScheduleKind {
  // Model-parallel backprop, no overlap: micro-batch m+1 enters stage 0
  // after stage 0's backward of m.
  kBackprop,
  // GPipe: per group, every forward, then every backward (oldest first; the
  // last stage backwards each right after its forward).
  kGpipe,
  // PipeDream-flush: per group, warm-up forwards, one forward one backward,
  // cool-down backwards.
  kOneFOneB,
  // PipeDream-style delayed gradients: PETRA's tick order.
  kDelayed,
  // PETRA: at tick t, stage j (0-based) of J forwards micro-batch t - j and
  // backwards micro-batch t - (2J - 2 - j); forward first. In steady state
  // a micro-batch's backward comes 2(J - 1 - j) ticks after its forward.
  kPetra,
  // Forward gradients: PETRA's tick order, where a stage's backward is its
  // update from the directional derivative that came down (no backward
  // pass through the stage), and its forward also pushes the tangents.
  kForwardGradient,
  // The passes that train nothing, run by the same executor: an evaluation
  // (each micro-batch forward, the last stage's loss) and the end-to-end
  // gradient check (backprop's order, one micro-batch at a time).
  kEval,
  kGradientCheck,
};

// The schedule a job's training mode runs.
ScheduleKind ScheduleForMode(petra::v1::TrainingMode mode);

enum class OpKind : uint8_t {
  kForward,
  kBackward,
  // The last stage's loss step: the forward, the loss and (but in an
  // evaluation) the backward of one micro-batch, as one step (it has the
  // loss at once).
  kForwardBackward,
};

struct ScheduledOp {
  int32_t micro_batch = 0;
  OpKind kind = OpKind::kForward;
  // When the op runs, in the schedule's own clock: PETRA's tick; for
  // backprop 2m (forward) and 2m + 1 (backward); else the op's position in
  // the stage's order. Staleness in ticks is measured with it.
  int32_t tick = 0;

  bool operator==(const ScheduledOp& o) const {
    return micro_batch == o.micro_batch && kind == o.kind && tick == o.tick;
  }
};

// Every operation of stage `stage` (0-based) of `stages` for micro-batches
// 0..micro_batches-1, one at a time: a pass of any length costs constant
// memory. `group` is the flush size of gpipe and 1f1b (>= 1; ignored by
// the others). On the last stage a forward directly followed by the
// backward of the same micro-batch becomes one kForwardBackward.
class StageSchedule {
 public:
  StageSchedule(ScheduleKind kind, int stage, int stages, int64_t micro_batches,
                int64_t group = 1);

  // The next operation; nullopt once every one was returned.
  std::optional<ScheduledOp> Next();
  // The operations left, in order (the simulator keeps them all).
  std::vector<ScheduledOp> Rest();

 private:
  // Refills `ops_` with the next unit (a tick, a micro-batch or a group).
  bool Refill();
  void Add(int64_t micro_batch, OpKind kind, int64_t tick);
  std::optional<ScheduledOp> NextUnmerged();

  const ScheduleKind kind_;
  const int stage_, stages_;
  const int64_t micro_batches_, group_;
  int64_t unit_ = 0;      // next tick, micro-batch or group start
  int64_t position_ = 0;  // ops made so far (tick of gpipe and 1f1b)
  std::deque<ScheduledOp> ops_;
  std::optional<ScheduledOp> lookahead_;
};

}  // namespace petra::schedule

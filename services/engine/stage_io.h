// What a stage receives and sends, as interfaces: the stage loop does
// Algorithm 1's work through them and knows nothing of the transport. The
// in-process runner implements them with queues between threads; the stage
// server implements them with gRPC streams.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/stage.pb.h"  // Phase
#include "services/engine/stage_worker.h"
#include "services/model/micro_batch.h"
#include "services/model/tensor_pair.h"
#include "services/schedule/pipeline_schedule.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {

// The micro-batches a stage takes and sends (services/model/micro_batch.h);
// in the in-process runner the header's other fields stay unset.
using model::BackwardBatch;
using model::ForwardBatch;

class StageInbox {
 public:
  virtual ~StageInbox() = default;
  // The next micro-batch to forward, which the schedule says is `id`.
  // CANCELLED when the run is being torn down.
  virtual absl::StatusOr<ForwardBatch> NextForward(int64_t id) = 0;
  // The next (output, gradient) pair to backward, micro-batch `id`.
  virtual absl::StatusOr<BackwardBatch> NextBackward(int64_t id) = 0;
};

class StageOutbox {
 public:
  virtual ~StageOutbox() = default;
  // To the next stage (never called on the last stage).
  virtual absl::Status SendForward(ForwardBatch item) = 0;
  // To the previous stage (never called on the first stage).
  virtual absl::Status SendBackward(BackwardBatch item) = 0;
  // The last stage finished micro-batch `id` (forward, loss and backward;
  // or, in an evaluation, forward and loss).
  virtual void ReportLoss(int64_t id, const LossOutput& loss) = 0;
  // The first stage (not also the last) finished the backward of `id`: the
  // micro-batch has left the pipeline.
  virtual void Finished(int64_t /*id*/) {}

  // What the stage just computed, for monitoring. The last stage's loss step
  // (its forward and backward in one) is reported as a forward with its time
  // and a backward of no time.
  struct Work {
    bool backward = false;
    int64_t samples = 0;
    double seconds = 0;
    int64_t delay_ticks = 0;      // backward only
    int64_t staleness_steps = 0;  // backward only
  };
  virtual void Observe(const Work& /*work*/) {}
  // Seconds of a training pass the stage was idle (waiting for its next
  // operation's input) or handing an output on, for monitoring.
  virtual void Idle(double /*seconds*/) {}
  virtual void Sending(double /*seconds*/) {}
};

// The one executor of a stage's pass, for the stage server and the
// in-process runner alike: the ops of `phase` (stage_mode_ops.h) in its
// schedule's order (pipeline_schedule.h). Training runs the stage's mode
// in `mode`'s order (its schedule, flushed every mode.group micro-batches
// where it flushes); the gradient check (end_to_end_check.h) runs the
// training pass's sampled micro-batches at each stage's kept weights in
// backprop's order; an evaluation forwards each micro-batch with BN running
// statistics, and the last stage reports its loss. A training pass with
// replicas ends with StageWorker::SettleReplicas. Returns the first error
// of the worker or the transport.
absl::Status RunStagePass(StageWorker& worker, StageInbox& inbox,
                          StageOutbox& outbox, petra::v1::Phase phase,
                          int64_t micro_batches,
                          const schedule::ModePlan& mode);

class StageOps;
// The executor under RunStagePass, for any ops: `ops` in `schedule`'s order
// (flushed every `group` micro-batches where it flushes), each operation's
// wait for its input counted as the stage's idle time and each send as its
// hand-over time where the ops are monitored.
absl::Status RunStageOps(StageWorker& worker, StageOps& ops,
                         schedule::ScheduleKind schedule, int64_t group,
                         StageInbox& inbox, StageOutbox& outbox,
                         int64_t micro_batches);

}  // namespace petra::engine

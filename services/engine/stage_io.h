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
#include "services/engine/pipeline_schedule.h"
#include "services/engine/stage_worker.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

// A micro-batch going up: the previous stage's output (or, on the first
// stage, the data batch) and, on the last stage, its labels.
struct ForwardItem {
  int64_t id = 0;
  model::TensorPair x;
  // The last stage's; in mode forward_gradient every stage's (local loss).
  torch::Tensor labels;
  // Mode forward_gradient: x's tangent along each earlier stage's guess,
  // stage 0's first.
  std::vector<model::TensorPair> tangents;
};

// A micro-batch going down: the receiving stage's output x~_j and
// delta_{j+1}; in mode forward_gradient, instead, the directional
// derivative of the loss along each guess of stages 0..j, j's last.
struct BackwardItem {
  int64_t id = 0;
  model::TensorPair output;
  model::TensorPair grad;
  std::vector<double> directional;
};

class StageInbox {
 public:
  virtual ~StageInbox() = default;
  // The next micro-batch to forward, which the schedule says is `id`.
  // CANCELLED when the run is being torn down.
  virtual absl::StatusOr<ForwardItem> NextForward(int64_t id) = 0;
  // The next (output, gradient) pair to backward, micro-batch `id`.
  virtual absl::StatusOr<BackwardItem> NextBackward(int64_t id) = 0;
};

class StageOutbox {
 public:
  virtual ~StageOutbox() = default;
  // To the next stage (never called on the last stage).
  virtual absl::Status SendForward(ForwardItem item) = 0;
  // To the previous stage (never called on the first stage).
  virtual absl::Status SendBackward(BackwardItem item) = 0;
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
};

// Runs one epoch of `micro_batches` on one stage in the order `schedule`
// gives it (engine/pipeline_schedule.h). Returns the first error of the
// worker or the transport.
absl::Status RunStageEpoch(StageWorker& worker, StageInbox& inbox,
                           StageOutbox& outbox, int64_t micro_batches,
                           ScheduleKind schedule);

// Runs the end-to-end gradient check after a training pass
// (end_to_end_check.h): the pass's sampled micro-batches, forward then
// backward one at a time at each stage's kept weights; the last stage
// reports each loss, the first each micro-batch's end.
absl::Status RunStageGradientCheck(StageWorker& worker, StageInbox& inbox,
                                   StageOutbox& outbox, int64_t micro_batches);

// Runs an evaluation of `micro_batches` on one stage: forward only with BN
// running statistics; the last stage reports each micro-batch's loss.
absl::Status RunStageEval(StageWorker& worker, StageInbox& inbox,
                          StageOutbox& outbox, int64_t micro_batches);

// The one executor of a stage's pass, for the stage server and the
// in-process runner alike: the loop of `phase` (training in `schedule`'s
// order, the gradient check, or an evaluation).
absl::Status RunStagePass(StageWorker& worker, StageInbox& inbox,
                          StageOutbox& outbox, petra::v1::Phase phase,
                          int64_t micro_batches, ScheduleKind schedule);

}  // namespace petra::engine

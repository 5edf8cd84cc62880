// What each op of a stage's pass does, as the executor (stage_loop.cc) sees
// it: what a forward sends up, what the last stage's loss step computes and
// sends down, and what a backward sends down. One set per pass: an
// evaluation's, the gradient check's, and for training the stage's mode
// (ModeOps: backpropagated gradients for backprop, delayed and PETRA; or
// forward gradients), chosen once, when the stage's worker is built at
// Assign. The executor never asks which mode or phase runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "services/engine/stage_io.h"

namespace petra::engine {

class StageOps {
 public:
  virtual ~StageOps() = default;
  // A forward going up (not on the last stage): what the next stage gets.
  virtual absl::StatusOr<ForwardBatch> Forward(StageWorker& w, ForwardBatch& in,
                                               int64_t tick) = 0;
  // The last stage's loss step of what came up, `in`.
  virtual absl::StatusOr<LossOutput> Loss(StageWorker& w, ForwardBatch& in,
                                          int64_t tick) = 0;
  // What that loss step sends down (not on stage 0); nothing in an
  // evaluation.
  virtual std::optional<BackwardBatch> LossDown(const StageWorker& w, int64_t m,
                                                LossOutput& out) = 0;
  // A backward of what came down, `in`.
  virtual absl::StatusOr<BackwardOutput> Backward(StageWorker& w,
                                                  BackwardBatch& in,
                                                  int64_t tick) = 0;
  // The samples that backward counted, for monitoring.
  virtual int64_t Samples(const BackwardBatch& in, const BackwardOutput& out) {
    return in.grad.a.defined() ? in.grad.a.size(0) : out.samples;
  }
  // What that backward sends down (not on stage 0).
  virtual BackwardBatch Down(int64_t m, BackwardBatch& in,
                             BackwardOutput& out) = 0;
  // What a pass begins and ends with on the stage.
  virtual void Begin(StageWorker& /*w*/) {}
  virtual absl::Status End(StageWorker& /*w*/) { return absl::OkStatus(); }
  // Whether the executor reports the ops' work for monitoring (training).
  virtual bool monitored() const { return false; }
};

// A training mode's ops, and whatever state the mode keeps beside the
// stage's (the auxiliary heads of forward gradients).
class ModeOps : public StageOps {
 public:
  // A training pass drops the gradient check's last samples, and ends
  // with the last calls' NaN and Inf checks (read late: non_finite.h).
  void Begin(StageWorker& w) override { w.BeginTrainingPass(); }
  absl::Status End(StageWorker& w) override { return w.SettleChecks(); }
  bool monitored() const override { return true; }
  virtual int64_t state_bytes() const { return 0; }
  // The mode's state by name (stage_state.h); only in checkpoints.
  virtual void AppendNamedState(NamedTensorList& /*out*/) const {}
  virtual absl::Status LoadNamedState(
      const std::map<std::string, torch::Tensor>& /*state*/,
      int64_t /*steps*/) {
    return absl::OkStatus();
  }
};

// The ops of the stage's mode (schedule::PlanMode): `schedule` is the job's
// learning-rate schedule, for whatever the mode optimizes of its own.
std::unique_ptr<ModeOps> MakeModeOps(const petra::v1::JobSpec& resolved,
                                     const StageConfig& config,
                                     LrSchedule schedule);

// The ops of the passes that train nothing.
StageOps& EvalOps();
StageOps& GradientCheckOps();

}  // namespace petra::engine

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_mode_ops.h"

namespace petra::engine {
namespace {

// Where what the stage computed lives: its device's memory, or the host.
model::TensorHome Home(const StageWorker& w) {
  return w.device().is_cpu() ? model::TensorHome::kHost
                             : model::TensorHome::kDevice;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// One pass's operations on a stage, each timed where a training pass is
// monitored: the inputs' waits are the stage's idle time (the schedule
// names the next operation, so waiting means nothing else may run), the
// sends its hand-over time, the ops their compute.
class PassOps {
 public:
  PassOps(StageWorker& w, StageOps& ops, StageInbox& inbox, StageOutbox& outbox)
      : w_(w), ops_(ops), inbox_(inbox), outbox_(outbox) {}

  // A forward going up (not on the last stage).
  absl::Status Forward(int64_t m, int64_t tick) {
    absl::StatusOr<ForwardBatch> in = TakeForward(m);
    if (!in.ok()) return in.status();
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ForwardBatch> up = ops_.Forward(w_, *in, tick);
    if (!up.ok()) return up.status();
    up->home = Home(w_);
    if (ops_.monitored()) {
      outbox_.Observe({false, in->x.a.size(0), SecondsSince(start)});
    }
    return Send([&] { return outbox_.SendForward(std::move(*up)); });
  }

  // The last stage's loss step.
  absl::Status ForwardLoss(int64_t m, int64_t tick) {
    absl::StatusOr<ForwardBatch> in = TakeForward(m);
    if (!in.ok()) return in.status();
    const int64_t samples = in->x.a.size(0);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<LossOutput> out = ops_.Loss(w_, *in, tick);
    if (!out.ok()) return out.status();
    if (ops_.monitored()) {
      outbox_.Observe({false, samples, SecondsSince(start)});
      outbox_.Observe({true, samples, 0.0});
    }
    outbox_.ReportLoss(m, *out);
    if (w_.index() == 0) return absl::OkStatus();
    std::optional<BackwardBatch> down = ops_.LossDown(w_, m, *out);
    if (!down) return absl::OkStatus();
    down->home = Home(w_);
    return Send([&] { return outbox_.SendBackward(std::move(*down)); });
  }

  absl::Status Backward(int64_t m, int64_t tick) {
    absl::StatusOr<BackwardBatch> in =
        Idle([&] { return inbox_.NextBackward(m); });
    if (!in.ok()) return in.status();
    if (in->id() != m) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected micro-batch ", m, " to backward, received ", in->id()));
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<BackwardOutput> out = ops_.Backward(w_, *in, tick);
    if (!out.ok()) return out.status();
    if (ops_.monitored()) {
      outbox_.Observe({true, ops_.Samples(*in, *out), SecondsSince(start),
                       out->delay_ticks, out->staleness_steps});
    }
    if (w_.index() == 0) {
      outbox_.Finished(m);
      return absl::OkStatus();
    }
    model::BackwardBatch down = ops_.Down(m, *in, *out);
    down.home = Home(w_);
    return Send([&] { return outbox_.SendBackward(std::move(down)); });
  }

 private:
  absl::StatusOr<ForwardBatch> TakeForward(int64_t m) {
    absl::StatusOr<ForwardBatch> in =
        Idle([&] { return inbox_.NextForward(m); });
    if (in.ok() && in->id() != m) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected micro-batch ", m, " to forward, received ", in->id()));
    }
    return in;
  }

  // `take`, its wait counted as idle time.
  template <typename F>
  auto Idle(F&& take) -> decltype(take()) {
    const auto start = std::chrono::steady_clock::now();
    auto got = take();
    if (ops_.monitored()) {
      const double seconds = SecondsSince(start);
      w_.CountIdle(seconds);
      outbox_.Idle(seconds);
    }
    return got;
  }

  // `send`, its time counted as hand-over time.
  template <typename F>
  absl::Status Send(F&& send) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = send();
    if (ops_.monitored()) {
      const double seconds = SecondsSince(start);
      w_.CountSend(seconds);
      outbox_.Sending(seconds);
    }
    return s;
  }

  StageWorker& w_;
  StageOps& ops_;
  StageInbox& inbox_;
  StageOutbox& outbox_;
};

// The stage's ops for `phase` and the order they run in.
struct PhasePlan {
  StageOps* ops;
  schedule::ScheduleKind schedule;
  int64_t group = 1;
};
PhasePlan PlanPhase(StageWorker& w, petra::v1::Phase phase,
                    const schedule::ModePlan& mode) {
  switch (phase) {
    case petra::v1::PHASE_TRAIN:
      return {&w.mode_ops(), mode.schedule, mode.group};
    case petra::v1::PHASE_GRADIENT_CHECK:
      return {&GradientCheckOps(), schedule::ScheduleKind::kGradientCheck};
    default:
      return {&EvalOps(), schedule::ScheduleKind::kEval};
  }
}

}  // namespace

absl::Status RunStagePass(StageWorker& w, StageInbox& inbox,
                          StageOutbox& outbox, petra::v1::Phase phase,
                          int64_t micro_batches,
                          const schedule::ModePlan& mode) {
  const PhasePlan plan = PlanPhase(w, phase, mode);
  const bool train = phase == petra::v1::PHASE_TRAIN;
  if (train) w.OpenTrainingPeak();
  absl::Status s = RunStageOps(w, *plan.ops, plan.schedule, plan.group, inbox,
                               outbox, micro_batches);
  if (train) w.CloseTrainingPeak();
  if (!s.ok()) return s;
  // Replicas meet once a training pass, each stage in its own group.
  return phase == petra::v1::PHASE_TRAIN ? w.SettleReplicas()
                                         : absl::OkStatus();
}

absl::Status RunStageOps(StageWorker& w, StageOps& ops,
                         schedule::ScheduleKind schedule, int64_t group,
                         StageInbox& inbox, StageOutbox& outbox,
                         int64_t micro_batches) {
  ops.Begin(w);
  PassOps pass(w, ops, inbox, outbox);
  schedule::StageSchedule order(schedule, w.index(), w.count(), micro_batches,
                                group);
  while (std::optional<schedule::ScheduledOp> op = order.Next()) {
    absl::Status s;
    switch (op->kind) {
      case schedule::OpKind::kForward:
        s = pass.Forward(op->micro_batch, op->tick);
        break;
      case schedule::OpKind::kForwardBackward:
        s = pass.ForwardLoss(op->micro_batch, op->tick);
        break;
      case schedule::OpKind::kBackward:
        s = pass.Backward(op->micro_batch, op->tick);
        break;
    }
    if (!s.ok()) return s;
  }
  return ops.End(w);
}

}  // namespace petra::engine

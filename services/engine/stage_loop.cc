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

absl::StatusOr<ForwardBatch> Take(StageInbox& inbox, int64_t m) {
  absl::StatusOr<ForwardBatch> in = inbox.NextForward(m);
  if (in.ok() && in->id() != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected micro-batch ", m, " to forward, received ", in->id()));
  }
  return in;
}

// A forward going up (not on the last stage).
absl::Status Forward(StageWorker& w, StageOps& ops, StageInbox& inbox,
                     StageOutbox& outbox, int64_t m, int64_t tick) {
  absl::StatusOr<ForwardBatch> in = Take(inbox, m);
  if (!in.ok()) return in.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<ForwardBatch> up = ops.Forward(w, *in, tick);
  if (!up.ok()) return up.status();
  up->home = Home(w);
  if (ops.monitored()) {
    outbox.Observe({false, in->x.a.size(0), SecondsSince(start)});
  }
  return outbox.SendForward(std::move(*up));
}

// The last stage's loss step.
absl::Status ForwardLoss(StageWorker& w, StageOps& ops, StageInbox& inbox,
                         StageOutbox& outbox, int64_t m, int64_t tick) {
  absl::StatusOr<ForwardBatch> in = Take(inbox, m);
  if (!in.ok()) return in.status();
  const int64_t samples = in->x.a.size(0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<LossOutput> out = ops.Loss(w, *in, tick);
  if (!out.ok()) return out.status();
  if (ops.monitored()) {
    outbox.Observe({false, samples, SecondsSince(start)});
    outbox.Observe({true, samples, 0.0});
  }
  outbox.ReportLoss(m, *out);
  if (w.index() == 0) return absl::OkStatus();
  std::optional<BackwardBatch> down = ops.LossDown(w, m, *out);
  if (!down) return absl::OkStatus();
  down->home = Home(w);
  return outbox.SendBackward(std::move(*down));
}

absl::Status Backward(StageWorker& w, StageOps& ops, StageInbox& inbox,
                      StageOutbox& outbox, int64_t m, int64_t tick) {
  absl::StatusOr<BackwardBatch> in = inbox.NextBackward(m);
  if (!in.ok()) return in.status();
  if (in->id() != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected micro-batch ", m, " to backward, received ", in->id()));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<BackwardOutput> out = ops.Backward(w, *in, tick);
  if (!out.ok()) return out.status();
  if (ops.monitored()) {
    outbox.Observe({true, ops.Samples(*in, *out), SecondsSince(start),
                    out->delay_ticks, out->staleness_steps});
  }
  if (w.index() == 0) {
    outbox.Finished(m);
    return absl::OkStatus();
  }
  model::BackwardBatch down = ops.Down(m, *in, *out);
  down.home = Home(w);
  return outbox.SendBackward(std::move(down));
}

// The stage's ops for `phase` and the order they run in.
struct PhasePlan {
  StageOps* ops;
  ScheduleKind schedule;
  int64_t group = 1;
};
PhasePlan PlanPhase(StageWorker& w, petra::v1::Phase phase,
                    const ModePlan& mode) {
  switch (phase) {
    case petra::v1::PHASE_TRAIN:
      return {&w.mode_ops(), mode.schedule, mode.group};
    case petra::v1::PHASE_GRADIENT_CHECK:
      return {&GradientCheckOps(), ScheduleKind::kGradientCheck};
    default:
      return {&EvalOps(), ScheduleKind::kEval};
  }
}

}  // namespace

absl::Status RunStagePass(StageWorker& w, StageInbox& inbox,
                          StageOutbox& outbox, petra::v1::Phase phase,
                          int64_t micro_batches, const ModePlan& mode) {
  const PhasePlan plan = PlanPhase(w, phase, mode);
  StageOps* ops = plan.ops;
  ops->Begin(w);
  StageSchedule order(plan.schedule, w.index(), w.count(), micro_batches,
                      plan.group);
  while (std::optional<ScheduledOp> op = order.Next()) {
    absl::Status s;
    switch (op->kind) {
      case OpKind::kForward:
        s = Forward(w, *ops, inbox, outbox, op->micro_batch, op->tick);
        break;
      case OpKind::kForwardBackward:
        s = ForwardLoss(w, *ops, inbox, outbox, op->micro_batch, op->tick);
        break;
      case OpKind::kBackward:
        s = Backward(w, *ops, inbox, outbox, op->micro_batch, op->tick);
        break;
    }
    if (!s.ok()) return s;
  }
  if (absl::Status s = ops->End(w); !s.ok()) return s;
  // Replicas meet once a training pass, each stage in its own group.
  return phase == petra::v1::PHASE_TRAIN ? w.SettleReplicas()
                                         : absl::OkStatus();
}

}  // namespace petra::engine

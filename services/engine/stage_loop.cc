#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_mode_ops.h"

namespace petra::engine {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::StatusOr<ForwardItem> Take(StageInbox& inbox, int64_t m) {
  absl::StatusOr<ForwardItem> in = inbox.NextForward(m);
  if (in.ok() && in->id != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected micro-batch ", m, " to forward, received ", in->id));
  }
  return in;
}

// A forward going up (not on the last stage).
absl::Status Forward(StageWorker& w, StageInbox& inbox, StageOutbox& outbox,
                     int64_t m, int64_t tick) {
  absl::StatusOr<ForwardItem> in = Take(inbox, m);
  if (!in.ok()) return in.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<ForwardItem> up = w.mode_ops().Forward(w, *in, tick);
  if (!up.ok()) return up.status();
  outbox.Observe({false, in->x.a.size(0), SecondsSince(start)});
  return outbox.SendForward(std::move(*up));
}

// The last stage's forward, loss and backward in one step.
absl::Status ForwardLoss(StageWorker& w, StageInbox& inbox, StageOutbox& outbox,
                         int64_t m, int64_t tick) {
  absl::StatusOr<ForwardItem> in = Take(inbox, m);
  if (!in.ok()) return in.status();
  const int64_t samples = in->x.a.size(0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<LossOutput> out =
      w.ForwardLoss(m, in->x, in->labels, tick, in->tangents);
  if (!out.ok()) return out.status();
  outbox.Observe({false, samples, SecondsSince(start)});
  outbox.Observe({true, samples, 0.0});
  outbox.ReportLoss(m, *out);
  if (w.index() == 0) return absl::OkStatus();
  return outbox.SendBackward(w.mode_ops().LossDown(w, m, *out));
}

absl::Status Backward(StageWorker& w, StageInbox& inbox, StageOutbox& outbox,
                      int64_t m, int64_t tick) {
  absl::StatusOr<BackwardItem> in = inbox.NextBackward(m);
  if (!in.ok()) return in.status();
  if (in->id != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected micro-batch ", m, " to backward, received ", in->id));
  }
  const ModeOps& mode = w.mode_ops();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<BackwardOutput> out = mode.Backward(w, *in, tick);
  if (!out.ok()) return out.status();
  outbox.Observe({true, mode.Samples(*in, *out), SecondsSince(start),
                  out->delay_ticks, out->staleness_steps});
  if (w.index() == 0) {
    outbox.Finished(m);
    return absl::OkStatus();
  }
  return outbox.SendBackward(mode.Down(m, *in, *out));
}

}  // namespace

absl::Status RunStageEpoch(StageWorker& w, StageInbox& inbox,
                           StageOutbox& outbox, int64_t micro_batches,
                           ScheduleKind schedule) {
  // The stages exchange what PETRA's tick order and backprop's need: the
  // last stage's forward is always its loss step. The flushing schedules
  // are the simulator's alone.
  if (schedule != ScheduleKind::kBackprop &&
      schedule != ScheduleKind::kDelayed && schedule != ScheduleKind::kPetra &&
      schedule != ScheduleKind::kForwardGradient) {
    return absl::InvalidArgumentError(
        "the stage runtime runs the backprop, delayed, petra and "
        "forward_gradient schedules");
  }
  w.BeginTrainingPass();
  StageSchedule ops(schedule, w.index(), w.count(), micro_batches);
  while (std::optional<ScheduledOp> op = ops.Next()) {
    absl::Status s;
    switch (op->kind) {
      case OpKind::kForward:
        s = Forward(w, inbox, outbox, op->micro_batch, op->tick);
        break;
      case OpKind::kForwardBackward:
        s = ForwardLoss(w, inbox, outbox, op->micro_batch, op->tick);
        break;
      case OpKind::kBackward:
        s = Backward(w, inbox, outbox, op->micro_batch, op->tick);
        break;
    }
    if (!s.ok()) return s;
  }
  // The last calls' NaN and Inf checks (read late: non_finite.h).
  return w.SettleChecks();
}

absl::Status RunStageGradientCheck(StageWorker& w, StageInbox& inbox,
                                   StageOutbox& outbox, int64_t micro_batches) {
  w.BeginGradientCheck();
  // Backprop's order, one micro-batch at a time: nothing here trains.
  for (int64_t i = 0; i < micro_batches; ++i) {
    absl::StatusOr<ForwardItem> in = Take(inbox, i);
    if (!in.ok()) return in.status();
    if (w.last()) {
      absl::StatusOr<LossOutput> out = w.CheckLoss(i, in->x, in->labels);
      if (!out.ok()) return out.status();
      outbox.ReportLoss(i, *out);
      if (w.index() == 0) continue;
      if (absl::Status s =
              outbox.SendBackward({i,
                                   std::move(out->backward.input),
                                   std::move(out->backward.input_grad),
                                   {}});
          !s.ok()) {
        return s;
      }
      continue;
    }
    absl::StatusOr<model::TensorPair> y = w.CheckForward(i, in->x);
    if (!y.ok()) return y.status();
    if (absl::Status s = outbox.SendForward({i, std::move(*y), {}, {}});
        !s.ok()) {
      return s;
    }
    absl::StatusOr<BackwardItem> down = inbox.NextBackward(i);
    if (!down.ok()) return down.status();
    absl::StatusOr<BackwardOutput> out = w.CheckBackward(i, down->grad);
    if (!out.ok()) return out.status();
    if (w.index() == 0) {
      outbox.Finished(i);
      continue;
    }
    if (absl::Status s = outbox.SendBackward(
            {i, std::move(out->input), std::move(out->input_grad), {}});
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status RunStageEval(StageWorker& w, StageInbox& inbox,
                          StageOutbox& outbox, int64_t micro_batches) {
  for (int64_t m = 0; m < micro_batches; ++m) {
    absl::StatusOr<ForwardItem> in = inbox.NextForward(m);
    if (!in.ok()) return in.status();
    if (!w.last()) {
      absl::StatusOr<model::TensorPair> y = w.Evaluate(in->x);
      if (!y.ok()) return y.status();
      if (absl::Status s = outbox.SendForward({m, std::move(*y), {}, {}});
          !s.ok())
        return s;
      continue;
    }
    absl::StatusOr<LossOutput> out = w.EvaluateLoss(in->x, in->labels);
    if (!out.ok()) return out.status();
    outbox.ReportLoss(m, *out);
  }
  return absl::OkStatus();
}

absl::Status RunStagePass(StageWorker& w, StageInbox& inbox,
                          StageOutbox& outbox, petra::v1::Phase phase,
                          int64_t micro_batches, ScheduleKind schedule) {
  switch (phase) {
    case petra::v1::PHASE_TRAIN:
      return RunStageEpoch(w, inbox, outbox, micro_batches, schedule);
    case petra::v1::PHASE_GRADIENT_CHECK:
      return RunStageGradientCheck(w, inbox, outbox, micro_batches);
    default:
      return RunStageEval(w, inbox, outbox, micro_batches);
  }
}

}  // namespace petra::engine

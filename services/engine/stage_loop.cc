#include <chrono>

#include "absl/strings/str_cat.h"
#include "services/engine/pipeline_schedule.h"
#include "services/engine/stage_io.h"

namespace petra::engine {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::Status Forward(StageWorker& w, StageInbox& inbox, StageOutbox& outbox,
                     int64_t m, int64_t tick, bool first) {
  absl::StatusOr<ForwardItem> in = inbox.NextForward(m);
  if (!in.ok()) return in.status();
  if (in->id != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected micro-batch ", m, " to forward, received ", in->id));
  }
  const int64_t samples = in->x.a.size(0);
  const auto start = std::chrono::steady_clock::now();
  if (!w.last()) {
    absl::StatusOr<model::TensorPair> y = w.Forward(m, in->x, tick);
    if (!y.ok()) return y.status();
    outbox.Observe({false, samples, SecondsSince(start)});
    return outbox.SendForward({m, std::move(*y), {}});
  }
  absl::StatusOr<LossOutput> out = w.ForwardLoss(m, in->x, in->labels, tick);
  if (!out.ok()) return out.status();
  outbox.Observe({false, samples, SecondsSince(start)});
  outbox.Observe({true, samples, 0.0});
  outbox.ReportLoss(m, *out);
  if (first) return absl::OkStatus();
  return outbox.SendBackward(
      {m, std::move(out->backward.input), std::move(out->backward.input_grad)});
}

absl::Status Backward(StageWorker& w, StageInbox& inbox, StageOutbox& outbox,
                      int64_t m, int64_t tick, bool first) {
  absl::StatusOr<BackwardItem> in = inbox.NextBackward(m);
  if (!in.ok()) return in.status();
  if (in->id != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected micro-batch ", m, " to backward, received ", in->id));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<BackwardOutput> out =
      w.Backward(m, in->output, in->grad, tick);
  if (!out.ok()) return out.status();
  outbox.Observe({true, in->grad.a.size(0), SecondsSince(start),
                  out->delay_ticks, out->staleness_steps});
  if (first) {
    outbox.Finished(m);
    return absl::OkStatus();
  }
  return outbox.SendBackward(
      {m, std::move(out->input), std::move(out->input_grad)});
}

}  // namespace

absl::Status RunStageEpoch(StageWorker& w, StageInbox& inbox,
                           StageOutbox& outbox, int64_t micro_batches,
                           bool overlap) {
  const bool first = w.index() == 0;
  if (overlap) {
    PipelineSchedule s{w.index(), w.count(), micro_batches};
    for (int64_t t = 0; t < s.ticks(); ++t) {
      if (int64_t f = s.ForwardAt(t); f >= 0) {
        if (absl::Status st = Forward(w, inbox, outbox, f, t, first); !st.ok())
          return st;
      }
      if (w.last()) continue;  // its backward is part of its forward
      if (int64_t b = s.BackwardAt(t); b >= 0) {
        if (absl::Status st = Backward(w, inbox, outbox, b, t, first); !st.ok())
          return st;
      }
    }
    return absl::OkStatus();
  }
  // Backprop: a micro-batch goes all the way up and down before the next
  // one starts (the first stage waits for its backward before feeding on).
  for (int64_t m = 0; m < micro_batches; ++m) {
    if (absl::Status st = Forward(w, inbox, outbox, m, 2 * m, first); !st.ok())
      return st;
    if (w.last()) continue;
    if (absl::Status st = Backward(w, inbox, outbox, m, 2 * m + 1, first);
        !st.ok()) {
      return st;
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
      if (absl::Status s = outbox.SendForward({m, std::move(*y), {}}); !s.ok())
        return s;
      continue;
    }
    absl::StatusOr<LossOutput> out = w.EvaluateLoss(in->x, in->labels);
    if (!out.ok()) return out.status();
    outbox.ReportLoss(m, *out);
  }
  return absl::OkStatus();
}

}  // namespace petra::engine

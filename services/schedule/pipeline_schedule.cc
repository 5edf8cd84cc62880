#include "services/schedule/pipeline_schedule.h"

#include <algorithm>

namespace petra::schedule {

ScheduleKind ScheduleForMode(petra::v1::TrainingMode mode) {
  switch (mode) {
    case petra::v1::TRAINING_MODE_BACKPROP:
      return ScheduleKind::kBackprop;
    case petra::v1::TRAINING_MODE_DELAYED:
      return ScheduleKind::kDelayed;
    case petra::v1::TRAINING_MODE_FORWARD_GRADIENT:
      return ScheduleKind::kForwardGradient;
    default:
      return ScheduleKind::kPetra;
  }
}

StageSchedule::StageSchedule(ScheduleKind kind, int stage, int stages,
                             int64_t micro_batches, int64_t group)
    : kind_(kind),
      stage_(stage),
      stages_(stages),
      micro_batches_(std::max<int64_t>(0, micro_batches)),
      group_(std::max<int64_t>(1, group)) {}

void StageSchedule::Add(int64_t m, OpKind kind, int64_t tick) {
  ops_.push_back({static_cast<int32_t>(m), kind, static_cast<int32_t>(tick)});
  ++position_;
}

bool StageSchedule::Refill() {
  switch (kind_) {
    case ScheduleKind::kEval: {
      if (unit_ >= micro_batches_) return false;
      const int64_t m = unit_++;
      Add(m,
          stage_ == stages_ - 1 ? OpKind::kForwardBackward : OpKind::kForward,
          m);
      return true;
    }
    case ScheduleKind::kBackprop:
    case ScheduleKind::kGradientCheck: {
      if (unit_ >= micro_batches_) return false;
      const int64_t m = unit_++;
      Add(m, OpKind::kForward, 2 * m);
      Add(m, OpKind::kBackward, 2 * m + 1);
      return true;
    }
    case ScheduleKind::kDelayed:
    case ScheduleKind::kPetra:
    case ScheduleKind::kForwardGradient: {
      const int64_t ticks = micro_batches_ + 2 * stages_ - 2;
      // A tick may hold nothing for this stage (filling and draining).
      while (ops_.empty() && unit_ < ticks) {
        const int64_t t = unit_++;
        if (int64_t f = t - stage_; f >= 0 && f < micro_batches_) {
          Add(f, OpKind::kForward, t);
        }
        if (int64_t b = t - (2 * stages_ - 2 - stage_);
            b >= 0 && b < micro_batches_) {
          Add(b, OpKind::kBackward, t);
        }
      }
      return !ops_.empty();
    }
    case ScheduleKind::kGpipe:
    case ScheduleKind::kOneFOneB: {
      if (unit_ >= micro_batches_) return false;
      const int64_t first = unit_;
      const int64_t n = std::min(group_, micro_batches_ - first);
      unit_ += n;
      if (kind_ == ScheduleKind::kGpipe) {
        // Backwards oldest first, as torch's ScheduleGPipe runs them; the
        // last stage has each loss at once, so it backwards each
        // micro-batch right after its forward (one loss step).
        const bool last = stage_ == stages_ - 1;
        for (int64_t m = first; m < first + n; ++m) {
          Add(m, OpKind::kForward, position_);
          if (last) Add(m, OpKind::kBackward, position_);
        }
        if (!last) {
          for (int64_t m = first; m < first + n; ++m) {
            Add(m, OpKind::kBackward, position_);
          }
        }
        return true;
      }
      // Enough warm-up forwards to fill the stages above, then one forward
      // one backward, then the backwards left.
      const int64_t warmup = std::min<int64_t>(stages_ - 1 - stage_, n);
      for (int64_t i = 0; i < warmup; ++i) {
        Add(first + i, OpKind::kForward, position_);
      }
      for (int64_t i = 0; i < n - warmup; ++i) {
        Add(first + warmup + i, OpKind::kForward, position_);
        Add(first + i, OpKind::kBackward, position_);
      }
      for (int64_t i = n - warmup; i < n; ++i) {
        Add(first + i, OpKind::kBackward, position_);
      }
      return true;
    }
  }
  return false;
}

std::optional<ScheduledOp> StageSchedule::NextUnmerged() {
  if (ops_.empty() && !Refill()) return std::nullopt;
  ScheduledOp op = ops_.front();
  ops_.pop_front();
  return op;
}

std::optional<ScheduledOp> StageSchedule::Next() {
  std::optional<ScheduledOp> op = lookahead_ ? lookahead_ : NextUnmerged();
  lookahead_.reset();
  if (!op || stage_ != stages_ - 1 || op->kind != OpKind::kForward) return op;
  // The last stage runs a forward and the backward right after it as one
  // step.
  lookahead_ = NextUnmerged();
  if (lookahead_ && lookahead_->kind == OpKind::kBackward &&
      lookahead_->micro_batch == op->micro_batch) {
    lookahead_.reset();
    op->kind = OpKind::kForwardBackward;
  }
  return op;
}

std::vector<ScheduledOp> StageSchedule::Rest() {
  std::vector<ScheduledOp> out;
  while (std::optional<ScheduledOp> op = Next()) out.push_back(*op);
  return out;
}

}  // namespace petra::schedule

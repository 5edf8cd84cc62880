#include "services/sim/schedule_order.h"

#include <algorithm>

namespace petra::sim {
namespace {

void Add(std::vector<SimOp>& ops, int64_t m, OpKind kind) {
  ops.push_back({static_cast<int32_t>(m), kind});
}

// GPipe: all forwards of the group, then all backwards, newest first.
void GpipeGroup(std::vector<SimOp>& ops, int64_t first, int64_t n) {
  for (int64_t m = first; m < first + n; ++m) Add(ops, m, OpKind::kForward);
  for (int64_t m = first + n - 1; m >= first; --m) {
    Add(ops, m, OpKind::kBackward);
  }
}

// 1F1B: enough warm-up forwards to fill the stages above, then one forward
// one backward, then the backwards left.
void OneFOneBGroup(std::vector<SimOp>& ops, int stage, int stages,
                   int64_t first, int64_t n) {
  const int64_t warmup = std::min<int64_t>(stages - 1 - stage, n);
  for (int64_t i = 0; i < warmup; ++i) Add(ops, first + i, OpKind::kForward);
  for (int64_t i = 0; i < n - warmup; ++i) {
    Add(ops, first + warmup + i, OpKind::kForward);
    Add(ops, first + i, OpKind::kBackward);
  }
  for (int64_t i = n - warmup; i < n; ++i) {
    Add(ops, first + i, OpKind::kBackward);
  }
}

// Tick t: forward t - j, then backward t - (2J - 2 - j), as in
// engine/pipeline_schedule.h.
void Ticks(std::vector<SimOp>& ops, int stage, int stages,
           int64_t micro_batches) {
  const int64_t ticks = micro_batches + 2 * stages - 2;
  for (int64_t t = 0; t < ticks; ++t) {
    if (int64_t f = t - stage; f >= 0 && f < micro_batches) {
      Add(ops, f, OpKind::kForward);
    }
    if (int64_t b = t - (2 * stages - 2 - stage); b >= 0 && b < micro_batches) {
      Add(ops, b, OpKind::kBackward);
    }
  }
}

// The last stage runs a forward and the backward right after it as one step.
std::vector<SimOp> MergeLossSteps(const std::vector<SimOp>& ops) {
  std::vector<SimOp> out;
  out.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kForward && i + 1 < ops.size() &&
        ops[i + 1].kind == OpKind::kBackward &&
        ops[i + 1].micro_batch == ops[i].micro_batch) {
      out.push_back({ops[i].micro_batch, OpKind::kForwardBackward});
      ++i;
    } else {
      out.push_back(ops[i]);
    }
  }
  return out;
}

}  // namespace

std::vector<SimOp> StageOrder(Schedule schedule, int stage, int stages,
                              int64_t micro_batches, int64_t group) {
  std::vector<SimOp> ops;
  ops.reserve(2 * micro_batches);
  switch (schedule) {
    case Schedule::kBackprop:
      for (int64_t m = 0; m < micro_batches; ++m) {
        Add(ops, m, OpKind::kForward);
        Add(ops, m, OpKind::kBackward);
      }
      break;
    case Schedule::kGpipe:
    case Schedule::kOneFOneB:
      for (int64_t first = 0; first < micro_batches; first += group) {
        const int64_t n = std::min(group, micro_batches - first);
        if (schedule == Schedule::kGpipe) {
          GpipeGroup(ops, first, n);
        } else {
          OneFOneBGroup(ops, stage, stages, first, n);
        }
      }
      break;
    case Schedule::kDelayed:
    case Schedule::kPetra:
      Ticks(ops, stage, stages, micro_batches);
      break;
  }
  return stage == stages - 1 ? MergeLossSteps(ops) : ops;
}

}  // namespace petra::sim

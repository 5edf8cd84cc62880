// The order in which one stage runs its forwards and backwards under each
// schedule. The simulator only follows these lists; the timing comes from
// when each operation's input arrives and when its device is free.
#pragma once

#include <cstdint>
#include <vector>

#include "services/sim/pipeline_sim.h"

namespace petra::sim {

enum class OpKind : uint8_t {
  kForward,
  kBackward,
  // The last stage's forward, loss and backward of one micro-batch, run as
  // one step (it has the loss at once).
  kForwardBackward,
};

struct SimOp {
  int32_t micro_batch = 0;
  OpKind kind = OpKind::kForward;

  bool operator==(const SimOp& o) const {
    return micro_batch == o.micro_batch && kind == o.kind;
  }
};

// Every operation of stage `stage` (0-based) of `stages` for micro-batches
// 0..micro_batches-1, in order. `group` is the flush size of gpipe and 1f1b
// (>= 1; ignored by the others). On the last stage a forward directly
// followed by the backward of the same micro-batch becomes one
// kForwardBackward.
std::vector<SimOp> StageOrder(Schedule schedule, int stage, int stages,
                              int64_t micro_batches, int64_t group);

}  // namespace petra::sim

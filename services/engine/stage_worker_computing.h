// StageWorker::Computing, shared by the files StageWorker's members are
// split across (stage_worker.cc, stage_worker_eval.cc). Internal to
// StageWorker.
#pragma once

#include <chrono>

#include "services/engine/non_finite.h"
#include "services/engine/stage_worker.h"
#include "services/engine/torch_guard.h"
#include "services/model/precision.h"

namespace petra::engine {

template <typename F>
auto StageWorker::Computing(absl::string_view what, F&& f) -> decltype(f()) {
  const size_t before = finite_.pending();
  const auto start = std::chrono::steady_clock::now();
  auto result = Guard(config_.index, what, [&]() -> decltype(f()) {
    model::ScopedAutocast cast(config_.device.type(), bf16_);
    model::ScopedHostAccount host(host_);
    return f();
  });
  // Training's compute time (the stage timers): the last stage's loss step,
  // forward and backward at once, and a forward-gradient update count as
  // backward; evaluation and checks count nowhere.
  double* timer = what == "forward" ? &forward_seconds_
                  : what == "backward" || what == "forward-loss" ||
                          what == "update"
                      ? &backward_seconds_
                      : nullptr;
  if (timer != nullptr) {
    *timer += std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            start)
                  .count();
  }
  // The checks queued by earlier calls are read once this call's kernels
  // are queued (one micro-batch behind); what they found comes first, as
  // the likelier cause of anything this call ran into.
  const size_t mine =
      finite_.pending() > before ? finite_.pending() - before : 0;
  if (absl::Status older = SettleChecks(mine); !older.ok()) return older;
  return result;
}

}  // namespace petra::engine

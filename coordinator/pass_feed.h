// One pass on the fleet, as the coordinator runs it: starts the pass on
// every stage, feeds the batches (data to the first stage, labels to the
// last, and to the first where FeedOptions says) from its own thread, tallies
// the completions the stages report, and watches until every micro-batch has
// left the pipeline, the job is interrupted, a stage fails or stops answering,
// or nothing finishes for too long.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/fleet_control.h"
#include "petra/v1/common.pb.h"
#include "petra/v1/job.pb.h"
#include "services/engine/pass_batches.h"
#include "services/engine/pass_result.h"

namespace petra::coordinator {

struct PassWatch {
  // Non-OK ends the pass (a cancel, or the coordinator stopping).
  std::function<absl::Status()> interrupted;
  // Asked every second: non-OK ends the pass (a stage failed or is gone).
  std::function<absl::Status()> poll;
  // Training passes, every 2 s: the totals so far (seconds since the pass
  // started).
  std::function<void(const engine::PassTotals&)> progress;
  // Samples of each micro-batch that came back with a finite loss.
  std::function<void(int64_t)> finite_samples;
};

struct FeedOptions {
  // The first stage gets the labels with the data too (mode
  // forward_gradient's training passes: every stage has a local loss).
  bool labels_with_data = false;
  // Where the feed reports what it waited for (none when null).
  CoordinatorMetrics* metrics = nullptr;
  // The data channels into the first stage and (labels) the last.
  petra::v1::Transport to_first = petra::v1::TRANSPORT_GRPC;
  petra::v1::Transport to_last = petra::v1::TRANSPORT_GRPC;
  // What the job asked for (auto lets a full channel fall back to gRPC).
  petra::v1::Transport wanted = petra::v1::TRANSPORT_AUTO;
};

// Runs the micro-batches of `batches` through the fleet (each message
// names its own epoch). The result's `seconds` is the pass's duration;
// training micro-batches are kept by pass id.
absl::StatusOr<engine::PassResult> RunFeedPass(
    StageFleet& fleet, const std::string& job_id, petra::v1::Phase phase,
    const engine::PassBatches& batches, const PassWatch& watch,
    FeedOptions options = {});

}  // namespace petra::coordinator

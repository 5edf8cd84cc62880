// Where a job's stages run: the placement planner (sim/placement) fed with
// the job's blocks (costs, the activation at each cut, each stage's memory
// estimate) and the servers that answered the probe (their memory and
// host). The coordinator calls it before any Assign, so a job that cannot
// fit is refused before a stage starts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/model/partition.h"
#include "services/sim/placement.h"

namespace petra::coordinator {

// What placement needs of a job's network, computed once (one block built
// at a time).
struct JobBlocks {
  std::vector<double> costs;  // PlanPartition's, per block
  bool seconds = false;       // whether `costs` are measured times
  std::vector<int64_t> cut_bytes;
  std::vector<int64_t> parameters;  // per block (the replicas' all-reduce)
  // engine::EstimateStageMemory's total for a stage.
  std::function<int64_t(model::BlockRange, int stage, int stages)> stage_bytes;
  // What that total is made of (engine::Breakdown), for a refusal.
  std::function<std::string(model::BlockRange, int stage, int stages)>
      stage_detail;
  // The partition every runner computes alone (PlanPartition).
  std::vector<model::BlockRange> ranges;
  // Whether the spec leaves the cut to the planner (a stage count, not
  // explicit splits or one stage per block).
  bool cut_is_free = false;
};

absl::StatusOr<JobBlocks> DescribeJobBlocks(const petra::v1::JobSpec& resolved);

// The servers for `ranges.size()` stages of each of `replicas` copies
// (Placement::servers: replica r's stage j at r J + j) and, when
// `keep_ranges` is false and the spec allows, a new cut; `servers` in the
// order they were listed. `accumulation`: k, the micro-batches per
// all-reduce.
// RESOURCE_EXHAUSTED naming the stage and the bytes when nothing fits.
// Link bandwidths (bytes/s; 0 = the planner's defaults) count only against
// measured block times.
absl::StatusOr<sim::Placement> PlaceStages(
    const JobBlocks& blocks, const std::vector<model::BlockRange>& ranges,
    bool keep_ranges, std::vector<sim::PlacementServer> servers,
    double host_link_bandwidth = 0, double cross_host_bandwidth = 0,
    int replicas = 1, int64_t accumulation = 1);

}  // namespace petra::coordinator

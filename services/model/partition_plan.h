// The partition a job asks for: one stage per block, or N stages balanced
// by estimated FLOPs or by forward+backward times measured here.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/model/network.h"
#include "services/model/network_summary.h"
#include "services/model/partition.h"

namespace petra::model {

// `resolved` from job::ResolveJobSpec.
absl::StatusOr<std::vector<BlockRange>> PlanPartition(
    const NetworkBlueprint& network, const petra::v1::JobSpec& resolved);

// What the partition balances, per block: seconds measured here
// (partition.cost = measured, with a stage count) or the estimate from the
// blocks' summary (FLOPs for cost = flops).
struct BlockCosts {
  std::vector<double> costs;
  bool seconds = false;  // whether `costs` are times
};
BlockCosts PartitionCosts(const NetworkBlueprint& network,
                          const std::vector<BlockSummary>& summary,
                          const petra::v1::JobSpec& resolved);

// The partition from costs already taken (PlanPartition without measuring
// again).
absl::StatusOr<std::vector<BlockRange>> PlanPartitionFromCosts(
    const std::vector<double>& costs, const petra::v1::JobSpec& resolved);

// Seconds of one forward and backward of each block on a micro-batch of
// `batch` random inputs (the best of `repeats`), on this thread's CPU; one
// block built at a time.
std::vector<double> MeasureBlockSeconds(const NetworkBlueprint& network,
                                        int64_t batch, int repeats = 2);

}  // namespace petra::model

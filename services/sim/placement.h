// Placement: which server runs each stage, and where the network is cut,
// from each server's memory, the fleet's topology (which servers share a
// host) and a per-block profile. It maximises PETRA's predicted throughput:
// in the steady state every device alternates one forward and one backward,
// and each link direction carries one message per micro-batch, so a
// micro-batch leaves every `bottleneck` (the slowest stage or link) — the
// rate the simulator settles at for the same inputs (SimConfigFor).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/model/partition.h"
#include "services/sim/pipeline_sim.h"

namespace petra::sim {

struct PlacementServer {
  std::string name;  // its address, for messages
  // Servers with the same host talk over the fast in-host links.
  std::string host;
  // What the stage may use; 0 = unknown (no limit).
  int64_t memory_bytes = 0;
  std::string memory_source;  // "its --memory-limit-bytes", for messages
};

struct PlacementProblem {
  // One micro-batch's forward and backward through each block, in the
  // unit of `seconds_per_cost` (seconds when it is 1).
  std::vector<double> block_costs;
  // Bytes of one micro-batch's activation at the cut after block b (one
  // entry per cut: blocks - 1). The backward sends twice that (the rebuilt
  // input and its gradient).
  std::vector<int64_t> cut_bytes;
  // Bytes stage `stage` of `stages` needs to run `range`.
  std::function<int64_t(model::BlockRange range, int stage, int stages)>
      stage_bytes;
  // Optional: what a stage's bytes are made of, for a refusal.
  std::function<std::string(model::BlockRange range, int stage, int stages)>
      stage_detail;
  std::vector<PlacementServer> servers;  // in the order they were listed
  int stages = 0;
  // Seconds per unit of block_costs; 0 when the costs are not times (a FLOP
  // estimate): links then cannot be weighed against compute and only the
  // number of links that cross hosts breaks ties.
  double seconds_per_cost = 0;
  double same_host_bandwidth = 50e9;  // bytes/s, each direction
  double cross_host_bandwidth = 5e9;  // bytes/s, each direction
  // Non-empty: the cut is given (a resumed job, explicit splits); only the
  // servers are chosen.
  std::vector<model::BlockRange> fixed_ranges;
  // Taken whenever it is as good as the best found (the partition every
  // runner computes alone, so the fleet and the in-process runner agree).
  std::vector<model::BlockRange> preferred_ranges;
  // Replicas (JobSpec.replicas): R copies of the pipeline, with one cut.
  // Every `accumulation` micro-batches each stage's copies average their
  // float32 gradients with a ring all-reduce: 2 (R - 1) / R x 4 x the
  // stage's parameters each way, at same_host_bandwidth when every copy is
  // on one host, else cross_host_bandwidth, on the stage's device (it adds
  // to the stage's time per micro-batch, amortised over the k).
  // block_parameters: each block's parameters; empty, or without
  // seconds_per_cost, the all-reduce is not weighed and rings across hosts
  // only break ties.
  int replicas = 1;
  int64_t accumulation = 1;
  std::vector<int64_t> block_parameters;
};

struct Placement {
  std::vector<model::BlockRange> ranges;
  // Index into PlacementProblem::servers, per stage; with replicas, replica
  // r's stage j at r J + j.
  std::vector<int> servers;
  // The slowest stage (with its all-reduce) or link per micro-batch, in
  // cost units.
  double bottleneck = 0;
  // Links between neighbours that cross hosts, and (replicas) stages
  // whose copies span more than one host.
  int cross_host_links = 0;
  int cross_host_rings = 0;
  std::vector<int64_t> stage_bytes;
};

// The best placement: the smallest bottleneck, then the fewest links across
// hosts, then servers in their listed order. Every order of the servers is
// tried when there are few (at most 8, and few enough distinct ones to cut
// each in about a second); otherwise the listed order and orders that keep
// hosts together with the most memory first. INVALID_ARGUMENT for a
// malformed problem; FAILED_PRECONDITION for fewer servers than stages;
// RESOURCE_EXHAUSTED when nothing fits, naming the stage, its blocks, the
// bytes it needs and the largest server's.
absl::StatusOr<Placement> PlanPlacement(const PlacementProblem& problem);

// The bottleneck of one placement (cost units), or -1 when a stage does
// not fit its server. `servers`: R x J entries with replicas, as
// Placement's.
double PlacementBottleneck(const PlacementProblem& problem,
                           const std::vector<model::BlockRange>& ranges,
                           const std::vector<int>& servers);

// The simulator's view of a placement, for PETRA (or `schedule`): stage
// costs split forward:backward as 1:3 of the block costs, each link's
// bandwidth from the hosts of its two servers. Needs seconds_per_cost > 0.
SimConfig SimConfigFor(const PlacementProblem& problem,
                       const Placement& placement, int64_t micro_batch_size,
                       int64_t micro_batches);

}  // namespace petra::sim

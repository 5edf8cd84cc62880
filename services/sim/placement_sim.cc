// A placement as the simulator sees it (placement.h, SimConfigFor): kept
// apart from the planner's search.
#include "services/sim/placement.h"

namespace petra::sim {

SimConfig SimConfigFor(const PlacementProblem& p, const Placement& placement,
                       int64_t micro_batch_size, int64_t micro_batches) {
  SimConfig c;
  c.micro_batch_size = micro_batch_size;
  c.micro_batches = micro_batches;
  c.schedule = Schedule::kPetra;
  const double unit = p.seconds_per_cost;
  for (size_t j = 0; j < placement.ranges.size(); ++j) {
    const model::BlockRange& r = placement.ranges[j];
    double cost = 0;
    for (int b = r.begin; b < r.end; ++b) cost += p.block_costs[b];
    StageCost s;
    s.forward_seconds = 0.25 * cost * unit;
    s.backward_seconds = 0.75 * cost * unit;
    s.input_bytes = r.begin > 0 ? p.cut_bytes[r.begin - 1] : 0;
    s.output_bytes = r.end < static_cast<int>(p.block_costs.size())
                         ? p.cut_bytes[r.end - 1]
                         : 0;
    s.reversible = true;
    c.stages.push_back(s);
    if (j > 0) {
      const bool same = p.servers[placement.servers[j - 1]].host ==
                        p.servers[placement.servers[j]].host;
      c.link_bandwidths.push_back(same ? p.same_host_bandwidth
                                       : p.cross_host_bandwidth);
    }
  }
  return c;
}

}  // namespace petra::sim

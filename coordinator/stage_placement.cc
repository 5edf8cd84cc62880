#include "coordinator/stage_placement.h"

#include "services/engine/memory_estimate.h"
#include "services/model/network_summary.h"
#include "services/model/partition_plan.h"

namespace petra::coordinator {

absl::StatusOr<JobBlocks> DescribeJobBlocks(const petra::v1::JobSpec& spec) {
  absl::StatusOr<model::NetworkBlueprint> net =
      model::DescribeNetwork(spec.model());
  if (!net.ok()) return net.status();
  JobBlocks out;
  // Shared by the memory estimate, which outlives this call.
  auto summary = std::make_shared<const std::vector<model::BlockSummary>>(
      model::SummarizeBlocks(*net));
  model::BlockCosts costs = model::PartitionCosts(*net, *summary, spec);
  out.costs = std::move(costs.costs);
  out.seconds = costs.seconds;
  absl::StatusOr<std::vector<model::BlockRange>> ranges =
      model::PlanPartitionFromCosts(out.costs, spec);
  if (!ranges.ok()) return ranges.status();
  out.ranges = std::move(*ranges);
  out.cut_is_free = spec.partition().has_stage_count();
  const int64_t element_bytes =
      spec.training().wire_dtype() == petra::v1::TrainingSpec::WIRE_DTYPE_BF16
          ? 2
          : 4;
  for (const model::BlockSummary& b : *summary) {
    out.parameters.push_back(b.parameters);
  }
  for (size_t b = 0; b + 1 < summary->size(); ++b) {
    out.cut_bytes.push_back(engine::OutputElements((*summary)[b]) *
                            spec.training().micro_batch_size() * element_bytes);
  }
  out.stage_bytes = [spec, summary, input = net->input_shape](
                        model::BlockRange r, int stage, int stages) {
    // The estimate reads only this stage's range and the stage count.
    std::vector<model::BlockRange> ranges(stages, r);
    return engine::EstimateStageMemory(spec, *summary, ranges, stage, input)
        .total();
  };
  out.stage_detail = [spec, summary, input = net->input_shape](
                         model::BlockRange r, int stage, int stages) {
    std::vector<model::BlockRange> ranges(stages, r);
    return engine::Breakdown(
        engine::EstimateStageMemory(spec, *summary, ranges, stage, input));
  };
  return out;
}

absl::StatusOr<sim::Placement> PlaceStages(
    const JobBlocks& blocks, const std::vector<model::BlockRange>& ranges,
    bool keep_ranges, std::vector<sim::PlacementServer> servers,
    double host_link_bandwidth, double cross_host_bandwidth, int replicas,
    int64_t accumulation) {
  sim::PlacementProblem p;
  p.block_costs = blocks.costs;
  p.cut_bytes = blocks.cut_bytes;
  p.stage_bytes = blocks.stage_bytes;
  p.stage_detail = blocks.stage_detail;
  p.servers = std::move(servers);
  p.stages = static_cast<int>(ranges.size());
  p.replicas = replicas;
  p.accumulation = accumulation;
  p.block_parameters = blocks.parameters;
  // Only measured times can be weighed against the links'; an estimate in
  // FLOPs leaves links to break ties.
  p.seconds_per_cost = blocks.seconds ? 1 : 0;
  if (host_link_bandwidth > 0) p.same_host_bandwidth = host_link_bandwidth;
  if (cross_host_bandwidth > 0) p.cross_host_bandwidth = cross_host_bandwidth;
  if (keep_ranges || !blocks.cut_is_free) {
    p.fixed_ranges = ranges;
  } else {
    p.preferred_ranges = ranges;
  }
  return sim::PlanPlacement(p);
}

}  // namespace petra::coordinator

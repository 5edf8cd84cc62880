#include "services/model/partition_plan.h"

#include <chrono>

#include "services/model/network_summary.h"

namespace petra::model {

std::vector<double> MeasureBlockSeconds(const NetworkBlueprint& network,
                                        int64_t batch, int repeats) {
  ScopedBnMode mode(BnMode::kBatchStats);  // running statistics untouched
  TensorPair x{ExampleInput(network, batch), {}};
  if (x.a.is_floating_point()) x.a.normal_();  // pixels; token ids stay 0
  std::vector<double> seconds;
  for (int i = 0; i < network.size(); ++i) {
    // One block at a time, as the summary.
    const std::shared_ptr<Block> block = BuildBlocks(network, i, i + 1, 0)[0];
    double best = 1e30;
    TensorPair y;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      TensorPair in{
          x.a.detach().requires_grad_(true),
          x.b.defined() ? x.b.detach().requires_grad_(true) : torch::Tensor()};
      y = block->Forward(in);
      torch::Tensor total = y.a.sum();
      if (y.b.defined()) total = total + y.b.sum();
      // Gradients with respect to the inputs only: parameters' .grad stay
      // untouched, and the parameters are still on the graph's path.
      std::vector<torch::Tensor> inputs = {in.a};
      if (in.b.defined()) inputs.push_back(in.b);
      for (const torch::Tensor& p : block->parameters()) inputs.push_back(p);
      torch::autograd::grad({total}, inputs, {}, false, false, true);
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count());
    }
    seconds.push_back(best);
    x = y.detach();
  }
  return seconds;
}

BlockCosts PartitionCosts(const NetworkBlueprint& network,
                          const std::vector<BlockSummary>& summary,
                          const petra::v1::JobSpec& resolved) {
  const petra::v1::PartitionSpec& p = resolved.partition();
  BlockCosts out;
  if (p.has_stage_count() &&
      p.cost() == petra::v1::PartitionSpec::COST_MEASURED) {
    out.costs =
        MeasureBlockSeconds(network, resolved.training().micro_batch_size());
    out.seconds = true;
    return out;
  }
  const bool flops_only =
      p.has_stage_count() && p.cost() == petra::v1::PartitionSpec::COST_FLOPS;
  for (const BlockSummary& b : summary) {
    out.costs.push_back(flops_only ? static_cast<double>(b.forward_flops)
                                   : EstimatedCost(b));
  }
  return out;
}

absl::StatusOr<std::vector<BlockRange>> PlanPartitionFromCosts(
    const std::vector<double>& costs, const petra::v1::JobSpec& resolved) {
  const petra::v1::PartitionSpec& p = resolved.partition();
  const int blocks = static_cast<int>(costs.size());
  if (p.has_splits()) {
    std::vector<BlockRange> ranges;
    int begin = 0;
    for (uint32_t at : p.splits().split_at()) {
      ranges.push_back({begin, static_cast<int>(at)});
      begin = static_cast<int>(at);
    }
    ranges.push_back({begin, blocks});
    for (const BlockRange& r : ranges) {
      if (r.begin >= r.end || r.end > blocks) {
        return absl::InvalidArgumentError(
            "partition.splits: split points must increase within the "
            "network's blocks");
      }
    }
    return ranges;
  }
  if (!p.has_stage_count()) return PerBlockPartition(blocks);
  return BalancedPartition(costs, static_cast<int>(p.stage_count()));
}

absl::StatusOr<std::vector<BlockRange>> PlanPartition(
    const NetworkBlueprint& network, const petra::v1::JobSpec& resolved) {
  const petra::v1::PartitionSpec& p = resolved.partition();
  if (!p.has_stage_count()) {  // no costs needed
    return PlanPartitionFromCosts(std::vector<double>(network.size(), 0.0),
                                  resolved);
  }
  return PlanPartitionFromCosts(
      PartitionCosts(network, SummarizeBlocks(network), resolved).costs,
      resolved);
}

}  // namespace petra::model

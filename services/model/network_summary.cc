#include "services/model/network_summary.h"

namespace petra::model {

int64_t CountParameters(torch::nn::Module& module) {
  int64_t n = 0;
  for (const torch::Tensor& p : module.parameters()) n += p.numel();
  return n;
}

std::vector<BlockSummary> SummarizeBlocks(const NetworkBlueprint& network) {
  torch::NoGradGuard no_grad;
  ScopedBnMode eval(BnMode::kRunningStats);
  TensorPair x{ExampleInput(network, 1), {}};
  std::vector<BlockSummary> out;
  for (int i = 0; i < network.size(); ++i) {
    // One block at a time: no more than the largest block is ever held.
    const std::shared_ptr<Block> block = BuildBlocks(network, i, i + 1, 0)[0];
    BlockSummary s;
    s.kind = block->kind();
    s.reversible = block->reversible();
    s.parameters = CountParameters(*block);
    {
      ScopedFlopCounter counter;
      x = block->Forward(x);
      s.forward_flops = counter.flops();
      s.forward_elementwise = counter.elementwise();
    }
    s.output_is_pair = x.is_pair();
    s.output_shape.assign(x.a.sizes().begin() + 1, x.a.sizes().end());
    out.push_back(std::move(s));
  }
  return out;
}

double EstimatedCost(const BlockSummary& block) {
  // A memory-bound element's forward and backward (BatchNorm's statistics
  // and normalisation, the activation, their gradients: several passes of
  // reads and writes) against a FLOP of a convolution's or matmul's:
  // fitted to `petra profile --stages per-block --threads 1` of the main
  // job (RevNet18, width 0.25, 28x28, micro-batch 64) on the 2-core build
  // machine, where blocks of equal FLOPs took 0.72, 0.47 and 0.35 ms per
  // sample at 28x28, 14x14 and 7x7 (docs/BENCHMARKS.md, "partition").
  constexpr double kFlopsPerElementwise = 250;
  return static_cast<double>(block.forward_flops) +
         kFlopsPerElementwise * static_cast<double>(block.forward_elementwise);
}

std::vector<StageSummary> SummarizeStages(
    const std::vector<BlockSummary>& blocks,
    const std::vector<BlockRange>& ranges) {
  std::vector<StageSummary> out;
  for (size_t i = 0; i < ranges.size(); ++i) {
    StageSummary s;
    s.index = static_cast<int>(i);
    s.blocks = ranges[i];
    s.reversible = true;
    for (int b = ranges[i].begin; b < ranges[i].end; ++b) {
      s.reversible &= blocks[b].reversible;
      s.parameters += blocks[b].parameters;
      s.forward_flops += blocks[b].forward_flops;
      s.forward_elementwise += blocks[b].forward_elementwise;
      s.estimated_cost += EstimatedCost(blocks[b]);
    }
    s.output_shape = blocks[ranges[i].end - 1].output_shape;
    s.output_is_pair = blocks[ranges[i].end - 1].output_is_pair;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace petra::model

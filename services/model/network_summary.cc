#include "services/model/network_summary.h"

namespace petra::model {

int64_t CountParameters(torch::nn::Module& module) {
  int64_t n = 0;
  for (const torch::Tensor& p : module.parameters()) n += p.numel();
  return n;
}

std::vector<BlockSummary> SummarizeBlocks(Network& network) {
  torch::NoGradGuard no_grad;
  ScopedBnMode eval(BnMode::kRunningStats);
  std::vector<int64_t> shape = {1};
  shape.insert(shape.end(), network.input_shape.begin(),
               network.input_shape.end());
  TensorPair x{torch::zeros(shape), {}};
  std::vector<BlockSummary> out;
  for (const std::shared_ptr<Block>& block : network.blocks) {
    BlockSummary s;
    s.kind = block->kind();
    s.reversible = block->reversible();
    s.parameters = CountParameters(*block);
    {
      ScopedFlopCounter counter;
      x = block->Forward(x);
      s.forward_flops = counter.flops();
    }
    s.output_is_pair = x.is_pair();
    s.output_shape.assign(x.a.sizes().begin() + 1, x.a.sizes().end());
    out.push_back(std::move(s));
  }
  return out;
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
    }
    s.output_shape = blocks[ranges[i].end - 1].output_shape;
    s.output_is_pair = blocks[ranges[i].end - 1].output_is_pair;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace petra::model

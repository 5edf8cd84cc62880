#include "services/engine/stage_blocks.h"

#include "services/engine/stage_memory.h"
#include "services/model/batch_norm.h"
#include "services/model/precision.h"
#include "services/model/reversible_block.h"

namespace petra::engine {

using model::TensorPair;

StageBlocks::StageBlocks(std::vector<std::shared_ptr<model::Block>> blocks,
                         bool first)
    : blocks_(std::move(blocks)), first_(first) {
  for (const auto& b : blocks_) {
    for (const torch::Tensor& p : b->parameters()) params_.push_back(p);
    for (bool decays : b->weight_decay_mask()) decays_.push_back(decays);
  }
}

bool StageBlocks::all_reversible() const {
  for (const auto& b : blocks_) {
    if (!b->reversible()) return false;
  }
  return true;
}

int64_t StageBlocks::state_bytes() const {
  int64_t n = TensorBytes(params_);
  for (const auto& b : blocks_) n += TensorBytes(b->buffers());
  return n;
}

TensorPair StageBlocks::Forward(const TensorPair& x) {
  TensorPair y = x;
  for (const auto& b : blocks_) {
    y = b->Forward(y);
    // Under bf16 autocast a block that is not a coupling (the stem, a
    // downsampling, the head) may end in bf16; what goes on is fp32.
    y = {model::ToFullPrecision(y.a), model::ToFullPrecision(y.b)};
  }
  return y;
}

TensorPair StageBlocks::Inverse(const TensorPair& output) {
  torch::NoGradGuard no_grad;
  model::ScopedBnMode mode(model::BnMode::kBatchStats);
  TensorPair y = output.detach();
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    y = static_cast<model::ReversibleBlock&>(**it).Inverse(y);
  }
  return y;
}

StageBlocks::Graph StageBlocks::ForwardWithGraph(const TensorPair& input) {
  const bool want_input_grad = !first_;
  Graph g;
  g.input = {input.a.detach().requires_grad_(want_input_grad),
             input.b.defined()
                 ? input.b.detach().requires_grad_(want_input_grad)
                 : torch::Tensor()};
  model::ScopedBnMode mode(model::BnMode::kBatchStatsUpdateRunning);
  g.output = Forward(g.input);
  return g;
}

TensorPair StageBlocks::Differentiate(
    const Graph& graph, const std::vector<torch::Tensor>& outputs,
    const std::vector<torch::Tensor>& grad_outputs,
    GradientAccumulator& grads) {
  const TensorPair& x = graph.input;
  const bool want_input_grad = !first_;
  if (outputs.empty()) {
    if (!want_input_grad) return {};
    return {torch::zeros_like(x.a),
            x.b.defined() ? torch::zeros_like(x.b) : torch::Tensor()};
  }
  std::vector<torch::Tensor> inputs;
  if (want_input_grad) {
    inputs.push_back(x.a);
    if (x.b.defined()) inputs.push_back(x.b);
  }
  const size_t first_param = inputs.size();
  inputs.insert(inputs.end(), params_.begin(), params_.end());
  std::vector<torch::Tensor> g = torch::autograd::grad(
      outputs, inputs, grad_outputs, false, false, /*allow_unused=*/true);
  grads.Add(params_,
            std::vector<torch::Tensor>(g.begin() + first_param, g.end()));
  if (!want_input_grad) return {};
  return {g[0], x.b.defined() ? g[1] : torch::Tensor()};
}

TensorPair StageBlocks::Recompute(const TensorPair& input, const Head& head,
                                  GradientAccumulator& grads) {
  const Graph graph = ForwardWithGraph(input);
  auto [outputs, grad_outputs] = head(graph.output);
  return Differentiate(graph, outputs, grad_outputs, grads);
}

void StageBlocks::SetWeights(const std::vector<torch::Tensor>& weights) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].detach().copy_(weights[i]);
  }
}

std::vector<torch::Tensor> StageBlocks::CopyWeights() const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : params_) out.push_back(p.detach().clone());
  return out;
}

}  // namespace petra::engine

// The blocks a stage runs and the two ways it runs them: a forward without
// a graph, and one with a graph, ending in a vector-Jacobian product (the
// backward from a kept input or a kept graph, and the last stage's loss
// step).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "services/engine/gradient_accumulator.h"
#include "services/model/blocks.h"

namespace petra::engine {

class StageBlocks {
 public:
  // `first`: the stage's input is data, so no gradient goes below it.
  StageBlocks(std::vector<std::shared_ptr<model::Block>> blocks, bool first);

  const std::vector<std::shared_ptr<model::Block>>& blocks() const {
    return blocks_;
  }
  // Every parameter, in block order.
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // Which parameters take weight decay (model::Block::weight_decay_mask).
  const std::vector<bool>& weight_decay_mask() const { return decays_; }
  bool all_reversible() const;
  // Parameters and buffers (BN running statistics).
  int64_t state_bytes() const;

  // The blocks in order, in the caller's gradient and BatchNorm modes.
  model::TensorPair Forward(const model::TensorPair& x);

  // Every block reversible: the input rebuilt from `output` by the
  // inverses alone, with the current weights; no graph, batch statistics,
  // the running ones untouched.
  model::TensorPair Inverse(const model::TensorPair& output);

  // Maps the blocks' output to (tensors to differentiate, their gradients);
  // nothing to differentiate (a skipped micro-batch) gives zero gradients.
  using Head = std::function<
      std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>(
          const model::TensorPair&)>;
  // Runs the blocks on `input` with a graph, updating the BN running
  // statistics (this is the backward's recompute), and takes one
  // vector-Jacobian product of what `head` makes of the output. Parameter
  // gradients go to `grads`; the input gradient is returned (undefined on
  // the first stage).
  model::TensorPair Recompute(const model::TensorPair& input, const Head& head,
                              GradientAccumulator& grads);

  // Recompute's two halves, for a graph kept between them (mode pipeline
  // without recompute): the forward with a graph, updating the BN running
  // statistics, from `input` made a leaf that wants its gradient (not on
  // the first stage)...
  struct Graph {
    model::TensorPair input;
    model::TensorPair output;
  };
  Graph ForwardWithGraph(const model::TensorPair& input);
  // ...and the vector-Jacobian product of `outputs` (made from
  // graph.output) with `grad_outputs`; the graph is freed. Nothing to
  // differentiate gives zero gradients.
  model::TensorPair Differentiate(const Graph& graph,
                                  const std::vector<torch::Tensor>& outputs,
                                  const std::vector<torch::Tensor>& grad_outputs,
                                  GradientAccumulator& grads);

  // Copies of the parameters' current values, and putting such values back
  // (weight stashing, diagnostics).
  std::vector<torch::Tensor> CopyWeights() const;
  void SetWeights(const std::vector<torch::Tensor>& weights);

 private:
  std::vector<std::shared_ptr<model::Block>> blocks_;
  std::vector<torch::Tensor> params_;
  std::vector<bool> decays_;
  bool first_;
};

}  // namespace petra::engine

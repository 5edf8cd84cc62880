#include "services/engine/backward_program.h"

#include "services/model/batch_norm.h"
#include "services/model/reversible_block.h"

namespace petra::engine {
namespace {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

model::ReversibleBlock& Reversible(model::Block& b) {
  return static_cast<model::ReversibleBlock&>(b);
}

// PETRA on reversible blocks: from the last block down, each rebuilds its
// input from its output with the current weights and gives the input and
// parameter gradients from one recompute of its residual functions.
class RebuildProgram : public BackwardProgram {
 public:
  explicit RebuildProgram(StageBlocks& blocks) : blocks_(blocks) {}
  bool rebuilds_input() const override { return true; }
  void Keep(const TensorPair&, ForwardRecord&) override {}

  BackwardOutput Run(const ForwardRecord&, const TensorPair& output,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    TensorPair y = output.detach();
    TensorPair g = output_grad;
    const auto& blocks = blocks_.blocks();
    ScopedBnMode mode(BnMode::kBatchStatsUpdateRunning);
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      model::Rebuilt r = Reversible(**it).RebuildWithVjp(y, g);
      grads.Add((*it)->parameters(), r.parameter_grads);
      y = std::move(r.input);
      g = std::move(r.input_grad);
    }
    return {y, g};
  }

  TensorPair SkippedInput(const ForwardRecord&,
                          const TensorPair& output) override {
    // The inverse alone, with batch statistics: the running ones stay.
    torch::NoGradGuard no_grad;
    ScopedBnMode mode(BnMode::kBatchStats);
    TensorPair y = output.detach();
    const auto& blocks = blocks_.blocks();
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      y = Reversible(**it).Inverse(y);
    }
    return y;
  }

 private:
  StageBlocks& blocks_;
};

// The input kept at forward, the forward recomputed with a graph.
class RecomputeProgram : public BackwardProgram {
 public:
  explicit RecomputeProgram(StageBlocks& blocks) : blocks_(blocks) {}
  bool rebuilds_input() const override { return false; }
  void Keep(const TensorPair& x, ForwardRecord& record) override {
    record.input = x.detach();
  }

  BackwardOutput Run(const ForwardRecord& record, const TensorPair&,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    BackwardOutput out;
    out.input = record.input;
    out.input_grad = blocks_.Recompute(
        record.input,
        [&](const TensorPair& y) {
          std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> og{
              {y.a}, {output_grad.a}};
          if (y.b.defined()) {
            og.first.push_back(y.b);
            og.second.push_back(output_grad.b);
          }
          return og;
        },
        grads);
    return out;
  }

  TensorPair SkippedInput(const ForwardRecord& record,
                          const TensorPair&) override {
    return record.input;
  }

 private:
  StageBlocks& blocks_;
};

// The weights the forward used, kept and put back for the backward; the
// update then applies to the current ones.
class StashedWeightsProgram : public BackwardProgram {
 public:
  StashedWeightsProgram(StageBlocks& blocks,
                        std::unique_ptr<BackwardProgram> inner)
      : blocks_(blocks), inner_(std::move(inner)) {}
  bool rebuilds_input() const override { return inner_->rebuilds_input(); }
  void Keep(const TensorPair& x, ForwardRecord& record) override {
    inner_->Keep(x, record);
    record.weights = blocks_.CopyWeights();
  }

  BackwardOutput Run(const ForwardRecord& record, const TensorPair& output,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    std::vector<torch::Tensor> current = blocks_.CopyWeights();
    blocks_.SetWeights(record.weights);
    BackwardOutput out = inner_->Run(record, output, output_grad, grads);
    blocks_.SetWeights(current);
    return out;
  }

  TensorPair SkippedInput(const ForwardRecord& record,
                          const TensorPair& output) override {
    return inner_->SkippedInput(record, output);
  }

 private:
  StageBlocks& blocks_;
  std::unique_ptr<BackwardProgram> inner_;
};

}  // namespace

std::unique_ptr<BackwardProgram> ChooseBackwardProgram(StageBlocks& blocks,
                                                       ProgramChoice choice) {
  std::unique_ptr<BackwardProgram> p;
  if (blocks.all_reversible() && !choice.stash_inputs) {
    p = std::make_unique<RebuildProgram>(blocks);
  } else {
    p = std::make_unique<RecomputeProgram>(blocks);
  }
  if (choice.stash_weights) {
    p = std::make_unique<StashedWeightsProgram>(blocks, std::move(p));
  }
  return p;
}

}  // namespace petra::engine

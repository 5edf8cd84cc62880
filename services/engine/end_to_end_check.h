// The end-to-end gradient check (training.end_to_end_every, the paper's
// Figure 5): for one micro-batch every N optimizer steps of a training pass,
// what this stage applied for it against the true gradient of the whole
// network's loss on it, taken at the weights every stage had when it applied
// its part (each stage's "current" weights then). PETRA's gradient carries
// its approximations (delay, rebuilt input, current weights); the true one
// none.
//
// During the training pass a stage keeps, for each sampled micro-batch, the
// gradient it added and its weights at that moment (2 x its parameter bytes
// a sample, until the pass ends). After the pass a gradient-check pass sends
// the sampled micro-batches through the stages again, in backprop's order,
// each stage computing with its kept weights (BatchNorm on batch statistics,
// its running statistics untouched, no gradient accumulated): exact
// backprop of the whole network at those weights. Each stage then compares.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "services/engine/stage_blocks.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

struct EndToEndSummary {
  int64_t samples = 0;  // micro-batches compared in the last check pass
  double cosine_similarity_mean = 0;
  double norm_ratio_mean = 0;  // |applied| / |true|
};

class EndToEndCheck {
 public:
  // `every`: optimizer steps between samples (0: off); `accumulation`: k.
  EndToEndCheck(int64_t every, int accumulation)
      : stride_(every * accumulation), accumulation_(accumulation) {}

  bool enabled() const { return stride_ > 0; }
  // Whether micro-batch `id` of a training pass is sampled: the last of
  // every N optimizer steps (id % (N k) == N k - 1). The check pass's i-th
  // micro-batch is the training pass's ((i + 1) N k - 1)-th
  // (PassBatches::Strided). Not the first: a pass starts with the pipeline
  // empty, and its first micro-batch meets no moved weight anywhere, so it
  // would always agree exactly.
  bool Samples(int64_t id) const {
    return stride_ > 0 && id % stride_ == stride_ - 1;
  }
  int64_t stride() const { return stride_; }
  // The training pass's id of the check pass's micro-batch `i`.
  int64_t TrainingId(int64_t i) const { return (i + 1) * stride_ - 1; }

  // Training: a pass begins (samples of an earlier one are dropped).
  void BeginPass() { samples_.clear(); }
  // At the end of sampled micro-batch `id`'s backward: what it added to the
  // accumulated gradients since `before` (their values before it; empty
  // when it added nothing, e.g. skipped) is 1/k of its gradient; kept with
  // the stage's weights now.
  void KeepSample(int64_t id, const StageBlocks& blocks,
                  const std::vector<torch::Tensor>& before);
  int64_t kept_bytes() const;

  // The check pass, micro-batch `i`. Forward: the output at the kept
  // weights (the input kept for the backward). NOT_FOUND when training
  // kept no sample for it.
  absl::StatusOr<model::TensorPair> Forward(int64_t i,
                                            const model::TensorPair& x,
                                            StageBlocks& blocks);
  // Last stage: the mean cross-entropy at the kept weights, compared at
  // once; returns the loss, the correct count and the input's gradient.
  struct LossStep {
    double loss = 0;
    int64_t correct = 0;
    model::TensorPair input_grad;  // undefined on a first stage
  };
  absl::StatusOr<LossStep> Loss(int64_t i, const model::TensorPair& x,
                                const torch::Tensor& labels,
                                StageBlocks& blocks, bool first);
  // Backward with the true delta_{j+1}: compares, and returns the kept input
  // and its gradient (undefined on a first stage).
  absl::StatusOr<std::pair<model::TensorPair, model::TensorPair>> Backward(
      int64_t i, const model::TensorPair& output_grad, StageBlocks& blocks,
      bool first);
  // A check pass begins: the summary starts over.
  void BeginCheck() { results_.clear(); }
  EndToEndSummary summary() const;

 private:
  struct Sample {
    torch::Tensor applied;  // flattened, the micro-batch's whole gradient
    std::vector<torch::Tensor> weights;
    model::TensorPair input;  // during the check pass
  };
  absl::StatusOr<Sample*> Find(int64_t i);
  // Compares and drops the sample.
  void Compare(int64_t i, const std::vector<torch::Tensor>& exact);

  const int64_t stride_;
  const int accumulation_;
  std::map<int64_t, Sample> samples_;               // by training id
  std::vector<std::pair<double, double>> results_;  // cosine, norm ratio
};

}  // namespace petra::engine

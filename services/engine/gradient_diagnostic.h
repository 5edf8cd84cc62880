// PETRA's parameter gradient for one micro-batch against the exact delayed
// gradient (the input and weights its forward used, the same delta): the
// cosine and norm ratio of the paper's appendix figures, sampled once every
// N optimizer steps (training.grad_diagnostics_every). In mode
// forward_gradient, the estimate d·v against the true gradient, which the
// sampled micro-batches' backward brings down for the purpose.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "services/engine/backward_program.h"
#include "services/engine/stage_blocks.h"

namespace petra::engine {

// The gradient of a stage's blocks at `input` and `weights` for
// `output_grad`: BatchNorm with batch statistics, its running statistics
// untouched, the stage's own weights put back after. Parameter gradients
// flattened (zeros where a parameter had no part) and, with `with_input`,
// the input's.
struct GradientAtPoint {
  std::vector<torch::Tensor> params;
  model::TensorPair input;
};
GradientAtPoint GradientAt(StageBlocks& blocks, const model::TensorPair& input,
                           const std::vector<torch::Tensor>& weights,
                           const model::TensorPair& output_grad,
                           bool with_input);

// Cosine similarity and |applied| / |exact| of two flat vectors (0 where a
// norm is 0).
std::pair<double, double> CosineAndNormRatio(const torch::Tensor& applied,
                                             const torch::Tensor& exact);

struct GradientDiagnostic {
  int64_t step = 0;
  double cosine_similarity = 0;
  double norm_ratio = 0;  // |PETRA| / |exact|
};

class GradientProbe {
 public:
  // `every`: optimizer steps between samples (0: never); `accumulation`: k.
  GradientProbe(int64_t every, int accumulation)
      : every_(every), accumulation_(accumulation) {}

  // At a forward taken at `steps` optimizer steps: keeps its input and
  // weights in `record` when this forward is the period's sample.
  void MaybeSample(int64_t steps, const model::TensorPair& x,
                   const StageBlocks& blocks, ForwardRecord& record);
  // Mode forward_gradient: every stage samples the same micro-batches, the
  // first of every N optimizer steps of a pass (id % (N k) == 0), as its
  // true gradient must come down through every stage.
  bool SamplesId(uint64_t id) const {
    return every_ > 0 &&
           id % static_cast<uint64_t>(every_ * accumulation_) == 0;
  }
  void Keep(const model::TensorPair& x, const StageBlocks& blocks,
            ForwardRecord& record) const;
  // Mode forward_gradient: `applied` (the estimate, unscaled) against the
  // exact gradient of the sampled record for `output_grad`; returns the
  // gradient for the stage's input (undefined when `with_input` is false).
  model::TensorPair CompareEstimate(const ForwardRecord& record,
                                    const model::TensorPair& output_grad,
                                    const std::vector<torch::Tensor>& applied,
                                    int64_t steps, bool with_input,
                                    StageBlocks& blocks);
  // Before the backward of a sampled record: the gradients so far.
  std::vector<torch::Tensor> GradientsBefore(const StageBlocks& blocks) const;
  // After it: what the backward added against the exact delayed gradient.
  void Compare(const ForwardRecord& record,
               const model::TensorPair& output_grad,
               const std::vector<torch::Tensor>& before, int64_t steps,
               StageBlocks& blocks);
  std::optional<GradientDiagnostic> last() const { return last_; }

 private:
  void Record(const torch::Tensor& applied, const torch::Tensor& exact,
              int64_t steps);

  const int64_t every_;
  const int accumulation_;
  int64_t last_sampled_step_ = -1;
  std::optional<GradientDiagnostic> last_;
};

}  // namespace petra::engine

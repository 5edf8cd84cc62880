// PETRA's parameter gradient for one micro-batch against the exact delayed
// gradient (the input and weights its forward used, the same delta): the
// cosine and norm ratio of the paper's appendix figures, sampled once every
// N optimizer steps (training.grad_diagnostics_every).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "services/engine/backward_program.h"
#include "services/engine/stage_blocks.h"

namespace petra::engine {

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
  // Before the backward of a sampled record: the gradients so far.
  std::vector<torch::Tensor> GradientsBefore(const StageBlocks& blocks) const;
  // After it: what the backward added against the exact delayed gradient.
  void Compare(const ForwardRecord& record,
               const model::TensorPair& output_grad,
               const std::vector<torch::Tensor>& before, int64_t steps,
               StageBlocks& blocks);
  std::optional<GradientDiagnostic> last() const { return last_; }

 private:
  const int64_t every_;
  const int accumulation_;
  int64_t last_sampled_step_ = -1;
  std::optional<GradientDiagnostic> last_;
};

}  // namespace petra::engine

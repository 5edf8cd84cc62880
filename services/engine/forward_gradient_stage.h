// The stage program of mode forward_gradient (training.proto,
// TRAINING_MODE_FORWARD_GRADIENT), in place of a backward program
// (backward_program.h) on every stage but the last: what arrives is checked
// here, the local loss runs through the auxiliary head
// (model/auxiliary_head.h), the guess v is drawn, the tangents are pushed
// up with the activation, and the update d·v is formed once the
// directional derivative d comes back. The stage worker keeps the record,
// the boundary checks and the optimizer, as for every program.
//
// What travels, for J stages and an activation of A bytes: the forward from
// stage j carries j + 1 tangents (one per stage up to it, each A bytes), so
// (j + 2)·A bytes in all, plus the labels; the backward to stage j carries
// j + 1 doubles and no tensor. Compute per stage but the last: with the
// local guess, one forward with a graph through the blocks and the head and
// one backward (the local gradient); then model::PushTangents per block for
// the j + 1 tangents (a forward with a graph, one backward kept
// differentiable, and one backward of that per tangent: about 3 forwards'
// worth for the first tangent and 1 to 2 for each further one). The last
// stage adds one dot product per tangent to its loss step. Kept between a
// forward and its update: v, one parameter-sized tensor set per
// micro-batch in flight (counted as the stage's weight stash).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/engine/gradient_accumulator.h"
#include "services/engine/lr_schedule.h"
#include "services/engine/stage_blocks.h"
#include "services/engine/stage_state.h"
#include "services/model/auxiliary_head.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

struct TangentForward {
  model::TensorPair output;  // detached
  // The incoming tangents pushed through the blocks, then this stage's own
  // (none under GUESS_LOCAL_ONLY).
  std::vector<model::TensorPair> tangents;
  // What the update needs: v (GUESS_LOCAL, GUESS_RANDOM), or the local
  // gradient itself (GUESS_LOCAL_ONLY).
  std::vector<torch::Tensor> guess;
  double local_loss = 0;  // 0 under GUESS_RANDOM (no head runs)
};

class ForwardGradientStage {
 public:
  // `stage`: the stage's index (seeds the head and the random guesses).
  ForwardGradientStage(const petra::v1::JobSpec& resolved, int stage,
                       LrSchedule schedule, torch::Device device);
  ~ForwardGradientStage();

  petra::v1::ForwardGradientSpec::Guess guess() const { return guess_; }

  // What a forward of micro-batch `id` received, before it runs:
  // INVALID_ARGUMENT unless there is one label per sample, one tangent per
  // earlier stage (none under GUESS_LOCAL_ONLY), each shaped like `x`.
  absl::Status CheckArrived(uint64_t id, const model::TensorPair& x,
                            const std::vector<model::TensorPair>& tangents,
                            const torch::Tensor& labels) const;

  // The training forward of a stage but the last for micro-batch `id`, its
  // guess drawn at `step` optimizer steps. Updates the BN running
  // statistics once and the auxiliary head (one accumulated step of its
  // own optimizer, in step with the stage's). INVALID_ARGUMENT when a
  // restored head does not fit the output's width.
  absl::StatusOr<TangentForward> Forward(
      StageBlocks& blocks, const model::TensorPair& x,
      const std::vector<model::TensorPair>& tangents,
      const torch::Tensor& labels, uint64_t id, int64_t step);

  // The gradient estimate from what Forward kept and the directional
  // derivatives that came down (one per stage 0..`stage`, this stage's
  // last); INVALID_ARGUMENT when their count is not stage + 1.
  absl::StatusOr<std::vector<torch::Tensor>> Estimate(
      const std::vector<torch::Tensor>& guess,
      const std::vector<double>& directional) const;

  // The head's state: "aux_head.<stage>.weight" and ".bias", with the
  // optimizer's as NamedStageState names it. Empty before the first
  // forward (the head is built when the output's width is known).
  NamedTensorList NamedState(bool with_optimizer) const;
  // Restores what NamedState(true) returned (nothing to restore when it
  // holds no head), with the optimizer's step counter at `steps`.
  absl::Status LoadNamedState(const std::map<std::string, torch::Tensor>& state,
                              int64_t steps);
  // Head parameters and their optimizer state.
  int64_t state_bytes() const;

 private:
  void BuildHead(int64_t features);

  const petra::v1::JobSpec spec_;
  const int stage_;
  const petra::v1::ForwardGradientSpec::Guess guess_;
  const int64_t classes_;
  const LrSchedule schedule_;
  const torch::Device device_;
  model::AuxiliaryHead head_;  // built at the first forward
  std::unique_ptr<GradientAccumulator> head_optimizer_;
  int64_t restored_steps_ = 0;
};

// The last stage's part: d_k = <delta, t_k> for each incoming tangent t_k
// (delta: the loss's gradient with respect to the stage's input), as the
// chain rule gives the directional derivative of the loss along stage k's
// guess. `count` values (one per stage below); zeros where no tangent came
// (GUESS_LOCAL_ONLY, whose stages do not use them).
std::vector<double> DirectionalDerivatives(
    const model::TensorPair& input_grad,
    const std::vector<model::TensorPair>& tangents, int count);

}  // namespace petra::engine

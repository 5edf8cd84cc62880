// Mode forward_gradient's ops (stage_mode_ops.h): activations go up with
// their tangents (and the labels, for every stage's local loss), and
// directional derivatives come down. Every stage but the last runs its
// forward through a ForwardGradientStage (the auxiliary head and the
// guess, forward_gradient_stage.h) in place of a backward program, and
// updates from d·v when the derivatives come down; the last stage runs the
// loss step of every mode and sends down the loss's derivative along each
// tangent.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "services/engine/forward_gradient_stage.h"
#include "services/engine/stage_mode_ops.h"

namespace petra::engine {

class ForwardGradientOps : public ModeOps {
 public:
  ForwardGradientOps(const petra::v1::JobSpec& resolved,
                     const StageConfig& config, LrSchedule schedule);
  ~ForwardGradientOps() override;

  absl::StatusOr<ForwardBatch> Forward(StageWorker& w, ForwardBatch& in,
                                       int64_t tick) override;
  absl::StatusOr<LossOutput> Loss(StageWorker& w, ForwardBatch& in,
                                  int64_t tick) override;
  std::optional<BackwardBatch> LossDown(const StageWorker& w, int64_t m,
                                        LossOutput& out) override;
  absl::StatusOr<BackwardOutput> Backward(StageWorker& w, BackwardBatch& in,
                                          int64_t tick) override;
  BackwardBatch Down(int64_t m, BackwardBatch& in,
                     BackwardOutput& out) override;

  int64_t state_bytes() const override;
  void AppendNamedState(NamedTensorList& out) const override;
  absl::Status LoadNamedState(const std::map<std::string, torch::Tensor>& state,
                              int64_t steps) override;

  // The parts, as the ops run them. A stage but the last forwards `x` with
  // its incoming `tangents` (one per earlier stage) and its `labels` (the
  // local loss), and returns its output with the tangents to send up, its
  // own last.
  absl::StatusOr<TangentForward> ForwardTangents(
      StageWorker& w, uint64_t id, const model::TensorPair& x,
      const std::vector<model::TensorPair>& tangents,
      const torch::Tensor& labels, int64_t tick);
  // ...and, once the directional derivatives of micro-batch `id` come down
  // (one per stage 0..this one), adds d·v to its gradient (the optimizer
  // steps every k). For a micro-batch the gradient diagnostic samples
  // (`Diagnoses`), `output_grad` is the true delta_{j+1}: the estimate is
  // compared with the true gradient, and the output's input_grad is
  // delta_j for the stage below; otherwise the output's tensors stay
  // undefined.
  absl::StatusOr<BackwardOutput> ApplyDirectional(
      StageWorker& w, uint64_t id, const std::vector<double>& directional,
      const model::TensorPair& output_grad, int64_t tick);
  // The last stage's loss step, and the loss's directional derivative
  // along each of `tangents` (tangents of x, one per earlier stage).
  absl::StatusOr<LossOutput> LossAlong(
      StageWorker& w, uint64_t id, const model::TensorPair& x,
      const torch::Tensor& labels, int64_t tick,
      const std::vector<model::TensorPair>& tangents);
  // Micro-batch `id`'s true gradient comes down beside its derivatives
  // (training.grad_diagnostics_every).
  static bool Diagnoses(const StageWorker& w, uint64_t id);

 private:
  // Every stage's but the last's (whose gradient is exact: no guess).
  std::unique_ptr<ForwardGradientStage> stage_;
};

}  // namespace petra::engine

#include "services/engine/stage_mode_ops.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/engine/forward_gradient_ops.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {
namespace {

// A backward of `out` going down: the rebuilt input and its gradient.
BackwardBatch InputAndGradient(int64_t m, BackwardOutput& out) {
  return model::BackwardOf(m, std::move(out.input), std::move(out.input_grad));
}

// Backprop, delayed and PETRA: activations go up; the output (to rebuild
// from) and its gradient come down.
class BackpropagatedOps : public ModeOps {
 public:
  absl::StatusOr<ForwardBatch> Forward(StageWorker& w, ForwardBatch& in,
                                       int64_t tick) override {
    absl::StatusOr<model::TensorPair> y = w.Forward(in.id(), in.x, tick);
    if (!y.ok()) return y.status();
    return model::ForwardOf(in.id(), std::move(*y));
  }
  absl::StatusOr<LossOutput> Loss(StageWorker& w, ForwardBatch& in,
                                  int64_t tick) override {
    return w.ForwardLoss(in.id(), in.x, in.labels, tick);
  }
  std::optional<BackwardBatch> LossDown(const StageWorker&, int64_t m,
                                        LossOutput& out) override {
    return InputAndGradient(m, out.backward);
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker& w, BackwardBatch& in,
                                          int64_t tick) override {
    return w.Backward(in.id(), in.output, in.grad, tick);
  }
  BackwardBatch Down(int64_t m, BackwardBatch&, BackwardOutput& out) override {
    return InputAndGradient(m, out);
  }
};

// The end-to-end gradient check (end_to_end_check.h): backprop's order at
// each stage's kept weights; nothing trains.
class GradientCheck : public StageOps {
 public:
  void Begin(StageWorker& w) override { w.BeginGradientCheck(); }
  absl::StatusOr<ForwardBatch> Forward(StageWorker& w, ForwardBatch& in,
                                       int64_t) override {
    absl::StatusOr<model::TensorPair> y = w.CheckForward(in.id(), in.x);
    if (!y.ok()) return y.status();
    return model::ForwardOf(in.id(), std::move(*y));
  }
  absl::StatusOr<LossOutput> Loss(StageWorker& w, ForwardBatch& in,
                                  int64_t) override {
    return w.CheckLoss(in.id(), in.x, in.labels);
  }
  std::optional<BackwardBatch> LossDown(const StageWorker&, int64_t m,
                                        LossOutput& out) override {
    return InputAndGradient(m, out.backward);
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker& w, BackwardBatch& in,
                                          int64_t) override {
    return w.CheckBackward(in.id(), in.grad);
  }
  BackwardBatch Down(int64_t m, BackwardBatch&, BackwardOutput& out) override {
    return InputAndGradient(m, out);
  }
};

// An evaluation: forward only with BN running statistics; the last stage
// reports each micro-batch's loss and sends nothing down.
class Evaluation : public StageOps {
 public:
  absl::StatusOr<ForwardBatch> Forward(StageWorker& w, ForwardBatch& in,
                                       int64_t) override {
    absl::StatusOr<model::TensorPair> y = w.Evaluate(in.x);
    if (!y.ok()) return y.status();
    return model::ForwardOf(in.id(), std::move(*y));
  }
  absl::StatusOr<LossOutput> Loss(StageWorker& w, ForwardBatch& in,
                                  int64_t) override {
    return w.EvaluateLoss(in.x, in.labels);
  }
  std::optional<BackwardBatch> LossDown(const StageWorker&, int64_t,
                                        LossOutput&) override {
    return std::nullopt;
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker&, BackwardBatch& in,
                                          int64_t) override {
    return absl::InternalError(absl::StrCat(
        "an evaluation has no backward (micro-batch ", in.id(), ")"));
  }
  BackwardBatch Down(int64_t m, BackwardBatch&, BackwardOutput&) override {
    return model::BackwardOf(m, {}, {});
  }
};

}  // namespace

std::unique_ptr<ModeOps> MakeModeOps(const petra::v1::JobSpec& resolved,
                                     const StageConfig& config,
                                     LrSchedule schedule) {
  if (schedule::PlanMode(resolved.training()).traffic.derivatives_down) {
    return std::make_unique<ForwardGradientOps>(resolved, config,
                                                std::move(schedule));
  }
  return std::make_unique<BackpropagatedOps>();
}

StageOps& EvalOps() {
  static Evaluation ops;
  return ops;
}

StageOps& GradientCheckOps() {
  static GradientCheck ops;
  return ops;
}

}  // namespace petra::engine

#include "services/engine/stage_mode_ops.h"

#include <utility>
#include <vector>

namespace petra::engine {
namespace {

// Backprop, delayed and PETRA: activations go up; the output (to rebuild
// from) and its gradient come down.
class BackpropagatedOps : public ModeOps {
 public:
  absl::StatusOr<ForwardItem> Forward(StageWorker& w, ForwardItem& in,
                                      int64_t tick) const override {
    absl::StatusOr<model::TensorPair> y = w.Forward(in.id, in.x, tick);
    if (!y.ok()) return y.status();
    return ForwardItem{in.id, std::move(*y), {}, {}};
  }
  BackwardItem LossDown(const StageWorker&, int64_t m,
                        LossOutput& out) const override {
    return {m,
            std::move(out.backward.input),
            std::move(out.backward.input_grad),
            {}};
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker& w, BackwardItem& in,
                                          int64_t tick) const override {
    return w.Backward(in.id, in.output, in.grad, tick);
  }
  int64_t Samples(const BackwardItem& in,
                  const BackwardOutput&) const override {
    return in.grad.a.size(0);
  }
  BackwardItem Down(int64_t m, BackwardItem&,
                    BackwardOutput& out) const override {
    return {m, std::move(out.input), std::move(out.input_grad), {}};
  }
};

// Forward gradients: activations go up with their tangents (and the labels,
// for every stage's local loss); directional derivatives come down.
class ForwardGradientOps : public ModeOps {
 public:
  absl::StatusOr<ForwardItem> Forward(StageWorker& w, ForwardItem& in,
                                      int64_t tick) const override {
    absl::StatusOr<TangentForward> y =
        w.ForwardTangents(in.id, in.x, in.tangents, in.labels, tick);
    if (!y.ok()) return y.status();
    // The labels go up for the local losses; the last stage has them from
    // the feed.
    const bool next_is_last = w.index() + 2 == w.count();
    return ForwardItem{in.id, std::move(y->output),
                       next_is_last ? torch::Tensor() : in.labels,
                       std::move(y->tangents)};
  }
  BackwardItem LossDown(const StageWorker& w, int64_t m,
                        LossOutput& out) const override {
    // A sampled micro-batch's true gradient goes down too (diagnostic).
    return {m,
            {},
            w.diagnoses(m) ? std::move(out.backward.input_grad)
                           : model::TensorPair(),
            std::move(out.directional)};
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker& w, BackwardItem& in,
                                          int64_t tick) const override {
    return w.ApplyDirectional(in.id, in.directional, in.grad, tick);
  }
  int64_t Samples(const BackwardItem&,
                  const BackwardOutput& out) const override {
    return out.samples;
  }
  BackwardItem Down(int64_t m, BackwardItem& in,
                    BackwardOutput& out) const override {
    std::vector<double> below = std::move(in.directional);
    below.pop_back();  // this stage's own
    return {m, {}, std::move(out.input_grad), std::move(below)};
  }
};

}  // namespace

const ModeOps& ModeOpsFor(bool forward_gradient) {
  static const BackpropagatedOps backpropagated;
  static const ForwardGradientOps forward;
  if (forward_gradient) return forward;
  return backpropagated;
}

}  // namespace petra::engine

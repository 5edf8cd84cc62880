// StageWorker's gradient check and evaluation: the weights are not
// changed, and BatchNorm statistics are not updated.
#include "services/engine/stage_boundary.h"
#include "services/engine/stage_worker.h"
#include "services/engine/stage_worker_computing.h"
#include "services/model/batch_norm.h"
#include "services/model/classification_loss.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

absl::StatusOr<TensorPair> StageWorker::CheckForward(int64_t i,
                                                     const TensorPair& x) {
  return Computing("gradient check", [&]() -> absl::StatusOr<TensorPair> {
    return check_.Forward(i, Arrive(x), blocks_);
  });
}

absl::StatusOr<LossOutput> StageWorker::CheckLoss(int64_t i,
                                                  const TensorPair& x,
                                                  const torch::Tensor& labels) {
  return Computing("gradient check", [&]() -> absl::StatusOr<LossOutput> {
    const TensorPair in = Arrive(x);
    absl::StatusOr<EndToEndCheck::LossStep> step =
        check_.Loss(i, in, model::ToDevice(labels, config_.device), blocks_,
                    config_.index == 0);
    if (!step.ok()) return step.status();
    LossOutput out;
    out.loss = step->loss;
    out.correct = step->correct;
    out.samples = labels.numel();  // a language model's: its tokens
    out.backward.input = in.detach();
    out.backward.input_grad = std::move(step->input_grad);
    return out;
  });
}

absl::StatusOr<BackwardOutput> StageWorker::CheckBackward(
    int64_t i, const TensorPair& output_grad) {
  return Computing("gradient check", [&]() -> absl::StatusOr<BackwardOutput> {
    auto r =
        check_.Backward(i, Arrive(output_grad), blocks_, config_.index == 0);
    if (!r.ok()) return r.status();
    BackwardOutput out;
    out.input = std::move(r->first);
    out.input_grad = std::move(r->second);
    return out;
  });
}

absl::StatusOr<TensorPair> StageWorker::Evaluate(const TensorPair& x) {
  return Computing("evaluate", [&]() -> absl::StatusOr<TensorPair> {
    torch::NoGradGuard no_grad;
    ScopedBnMode mode(BnMode::kRunningStats);
    return blocks_.Forward(Arrive(x));
  });
}

absl::StatusOr<LossOutput> StageWorker::EvaluateLoss(
    const TensorPair& x, const torch::Tensor& received_labels) {
  absl::StatusOr<TensorPair> y = Evaluate(x);
  if (!y.ok()) return y.status();
  return Computing("evaluate", [&]() -> absl::StatusOr<LossOutput> {
    const torch::Tensor labels =
        model::ToDevice(received_labels, config_.device);
    if (absl::Status s = model::CheckLabels(labels, y->a.size(0)); !s.ok()) {
      return s;
    }
    LossOutput out;
    out.loss = model::CrossEntropy(y->a, labels).item<double>();
    out.correct = model::CorrectCount(y->a, labels);
    out.samples = labels.numel();  // a language model's: its tokens
    return out;
  });
}

}  // namespace petra::engine

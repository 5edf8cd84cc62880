#include "services/engine/forward_gradient_ops.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/engine/stage_boundary.h"
#include "services/engine/stage_worker.h"

namespace petra::engine {

using model::TensorPair;

ForwardGradientOps::ForwardGradientOps(const petra::v1::JobSpec& resolved,
                                       const StageConfig& config,
                                       LrSchedule schedule)
    : stage_(
          config.index + 1 < config.count
              ? std::make_unique<ForwardGradientStage>(
                    resolved, config.index, std::move(schedule), config.device)
              : nullptr) {}

ForwardGradientOps::~ForwardGradientOps() = default;

absl::StatusOr<ForwardBatch> ForwardGradientOps::Forward(StageWorker& w,
                                                         ForwardBatch& in,
                                                         int64_t tick) {
  absl::StatusOr<TangentForward> y =
      ForwardTangents(w, in.id(), in.x, in.tangents, in.labels, tick);
  if (!y.ok()) return y.status();
  // The labels go up for the local losses; the last stage has them from
  // the feed.
  const bool next_is_last = w.index() + 2 == w.count();
  return model::ForwardOf(in.id(), std::move(y->output),
                          next_is_last ? torch::Tensor() : in.labels,
                          std::move(y->tangents));
}

absl::StatusOr<LossOutput> ForwardGradientOps::Loss(StageWorker& w,
                                                    ForwardBatch& in,
                                                    int64_t tick) {
  return LossAlong(w, in.id(), in.x, in.labels, tick, in.tangents);
}

std::optional<BackwardBatch> ForwardGradientOps::LossDown(const StageWorker& w,
                                                          int64_t m,
                                                          LossOutput& out) {
  // One derivative per stage below, zeros where no tangent came
  // (GUESS_LOCAL_ONLY, whose stages do not use them).
  out.directional.resize(w.index(), 0.0);
  // A sampled micro-batch's true gradient goes down too (diagnostic).
  return model::BackwardOf(m, {},
                           Diagnoses(w, m) ? std::move(out.backward.input_grad)
                                           : model::TensorPair(),
                           std::move(out.directional));
}

absl::StatusOr<BackwardOutput> ForwardGradientOps::Backward(StageWorker& w,
                                                            BackwardBatch& in,
                                                            int64_t tick) {
  return ApplyDirectional(w, in.id(), in.directional, in.grad, tick);
}

BackwardBatch ForwardGradientOps::Down(int64_t m, BackwardBatch& in,
                                       BackwardOutput& out) {
  std::vector<double> below = std::move(in.directional);
  below.pop_back();  // this stage's own
  return model::BackwardOf(m, {}, std::move(out.input_grad), std::move(below));
}

bool ForwardGradientOps::Diagnoses(const StageWorker& w, uint64_t id) {
  return w.diagnoses(id);
}

int64_t ForwardGradientOps::state_bytes() const {
  return stage_ ? stage_->state_bytes() : 0;
}

void ForwardGradientOps::AppendNamedState(NamedTensorList& out) const {
  // The auxiliary head trains with the stage but is not part of the model:
  // checkpoints keep it, the export does not.
  if (stage_ == nullptr) return;
  for (auto& named : stage_->NamedState(true)) out.push_back(std::move(named));
}

absl::Status ForwardGradientOps::LoadNamedState(
    const std::map<std::string, torch::Tensor>& state, int64_t steps) {
  return stage_ ? stage_->LoadNamedState(state, steps) : absl::OkStatus();
}

absl::StatusOr<TangentForward> ForwardGradientOps::ForwardTangents(
    StageWorker& w, uint64_t id, const TensorPair& input,
    const std::vector<TensorPair>& received_tangents,
    const torch::Tensor& received_labels, int64_t tick) {
  if (stage_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", w.index(),
        " takes no tangents: it is the last stage, or the job's mode "
        "is not forward_gradient"));
  }
  TangentForward out;
  absl::Status s = w.ForwardOwn(
      id, input, tick,
      [&](const TensorPair& x, ForwardRecord& r,
          const StageWorker::Parts& parts) -> absl::StatusOr<TensorPair> {
        std::vector<TensorPair> tangents;
        for (const TensorPair& t : received_tangents) {
          tangents.push_back(w.Arrive(t));
        }
        if (absl::Status s =
                stage_->CheckArrived(id, x, tangents, received_labels);
            !s.ok()) {
          return s;
        }
        absl::StatusOr<TangentForward> forward = stage_->Forward(
            parts.blocks, x, tangents, received_labels, id, r.step);
        if (!forward.ok()) return forward.status();
        out = std::move(*forward);
        r.guess = out.guess;
        r.samples = x.a.size(0);
        // Kept apart from the memory accounting.
        if (parts.probe.SamplesId(id)) parts.probe.Keep(x, parts.blocks, r);
        return out.output;
      });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<BackwardOutput> ForwardGradientOps::ApplyDirectional(
    StageWorker& w, uint64_t id, const std::vector<double>& directional,
    const TensorPair& output_grad, int64_t tick) {
  if (stage_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", w.index(), " takes no directional derivatives"));
  }
  for (double d : directional) {
    if (!std::isfinite(d)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the directional derivative of micro-batch ", id, " is ",
                       d, " (training diverged; lower the learning rate)"));
    }
  }
  return w.UpdateOwn(
      id, tick,
      [&](ForwardRecord& r,
          const StageWorker::Parts& parts) -> absl::StatusOr<BackwardOutput> {
        absl::StatusOr<std::vector<torch::Tensor>> estimate =
            stage_->Estimate(r.guess, directional);
        if (!estimate.ok()) return estimate.status();
        parts.optimizer.Add(parts.blocks.parameters(), *estimate);
        BackwardOutput out;
        out.samples = r.samples;
        if (!r.diagnostic_weights.empty() && output_grad.a.defined()) {
          out.input_grad = parts.probe.CompareEstimate(
              r, w.Arrive(output_grad), *estimate, parts.optimizer.steps(),
              /*with_input=*/w.index() > 0, parts.blocks);
        }
        return out;
      });
}

absl::StatusOr<LossOutput> ForwardGradientOps::LossAlong(
    StageWorker& w, uint64_t id, const TensorPair& x,
    const torch::Tensor& labels, int64_t tick,
    const std::vector<TensorPair>& tangents) {
  absl::StatusOr<LossOutput> out = w.ForwardLoss(id, x, labels, tick);
  if (!out.ok() || tangents.empty()) return out;
  // delta_0 . v for each tangent v of x; the gradient as it goes down the
  // wire (bf16 when training.wire_dtype says so), and zero for a skipped
  // micro-batch.
  const TensorPair delta = w.Arrive(out->backward.input_grad);
  std::vector<TensorPair> arrived;
  for (const TensorPair& t : tangents) arrived.push_back(w.Arrive(t));
  out->directional =
      DirectionalDerivatives(delta, arrived, static_cast<int>(arrived.size()));
  return out;
}

}  // namespace petra::engine

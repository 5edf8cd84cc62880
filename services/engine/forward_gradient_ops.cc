// StageWorker's forward-gradient ops: the forward with tangents (jvp) and
// the update along a directional derivative.
#include "services/engine/stage_boundary.h"
#include "services/engine/stage_worker.h"
#include "services/engine/stage_worker_computing.h"
#include "services/engine/training_mode.h"
#include "services/model/batch_norm.h"
#include "services/model/classification_loss.h"

namespace petra::engine {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

absl::StatusOr<TangentForward> StageWorker::ForwardTangents(
    uint64_t id, const TensorPair& input,
    const std::vector<TensorPair>& received_tangents,
    const torch::Tensor& received_labels, int64_t tick) {
  return Computing("forward", [&]() -> absl::StatusOr<TangentForward> {
    if (fg_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", config_.index,
          " takes no tangents: it is the last stage, or the job's mode "
          "is not forward_gradient"));
    }
    const TensorPair x = Arrive(input);
    absl::StatusOr<ForwardRecord> begun = BeginRecord(id, x, tick, "updated");
    if (!begun.ok()) return begun.status();
    ForwardRecord& r = *begun;
    std::vector<TensorPair> tangents;
    for (const TensorPair& t : received_tangents) tangents.push_back(Arrive(t));
    if (absl::Status s = fg_->CheckArrived(id, x, tangents, received_labels);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<TangentForward> forward =
        fg_->Forward(blocks_, x, tangents, received_labels, id, r.step);
    if (!forward.ok()) return forward.status();
    TangentForward& out = *forward;
    if (absl::Status s =
            finite_.Check(out.output, id, "the output activation", &r.skipped);
        !s.ok()) {
      return s;
    }
    r.guess = out.guess;
    r.samples = x.a.size(0);
    // Kept apart from the memory accounting.
    if (probe_.SamplesId(id)) probe_.Keep(x, blocks_, r);
    ledger_.Keep(0, TensorBytes(r.guess));
    records_.emplace(id, std::move(r));
    ++forwards_;
    UpdatePeak();
    return std::move(out);
  });
}

absl::StatusOr<BackwardOutput> StageWorker::ApplyDirectional(
    uint64_t id, const std::vector<double>& directional,
    const TensorPair& output_grad, int64_t tick) {
  return Computing("update", [&]() -> absl::StatusOr<BackwardOutput> {
    if (fg_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", config_.index, " takes no directional derivatives"));
    }
    for (double d : directional) {
      if (!std::isfinite(d)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the directional derivative of micro-batch ", id, " is ", d,
            " (training diverged; lower the learning rate)"));
      }
    }
    absl::StatusOr<ForwardRecord> r = TakeRecord(id);
    if (!r.ok()) return r.status();
    absl::StatusOr<std::vector<torch::Tensor>> estimate =
        fg_->Estimate(r->guess, directional);
    if (!estimate.ok()) return estimate.status();
    optimizer_.Add(blocks_.parameters(), *estimate);
    BackwardOutput out;
    out.samples = r->samples;
    if (!r->diagnostic_weights.empty() && output_grad.a.defined()) {
      out.input_grad = probe_.CompareEstimate(
          *r, Arrive(output_grad), *estimate, optimizer_.steps(),
          /*with_input=*/config_.index > 0, blocks_);
    }
    Measure(*r, tick, out);
    FinishBackward();
    return out;
  });
}

}  // namespace petra::engine

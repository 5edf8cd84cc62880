#include "services/engine/non_finite.h"

#include "absl/strings/str_cat.h"

namespace petra::engine {
namespace {

// Whether every element of `p` is finite, as a bool scalar on its device;
// undefined when nothing in `p` is floating point.
torch::Tensor AllFinite(const model::TensorPair& p) {
  torch::Tensor all;
  for (const torch::Tensor* t : {&p.a, &p.b}) {
    if (!t->defined() || !t->is_floating_point()) continue;
    torch::Tensor finite = torch::isfinite(*t).all();
    all = all.defined() ? all.logical_and(finite) : finite;
  }
  return all;
}

}  // namespace

absl::Status NonFiniteCheck::Check(const model::TensorPair& t, uint64_t id,
                                   const char* what, bool* skip) {
  torch::NoGradGuard no_grad;
  torch::Tensor finite = AllFinite(t);
  if (!finite.defined()) return absl::OkStatus();
  if (!skips()) {
    pending_.push_back({std::move(finite), id, what});
    return absl::OkStatus();
  }
  if (!finite.item<bool>()) *skip = true;
  return absl::OkStatus();
}

absl::Status NonFiniteCheck::Settle(size_t keep) {
  if (pending_.size() <= keep) return absl::OkStatus();
  const size_t n = pending_.size() - keep;
  // Gathered on the stage's device, then one transfer (one wait).
  const torch::Device device = pending_[0].finite.device();
  std::vector<torch::Tensor> flags;
  for (size_t i = 0; i < n; ++i) flags.push_back(pending_[i].finite.to(device));
  const torch::Tensor read = torch::stack(flags).cpu();
  const bool* ok = read.data_ptr<bool>();
  absl::Status status;
  for (size_t i = 0; i < n; ++i) {
    if (!ok[i]) {
      status = Failure(pending_[i].id, pending_[i].what);
      break;
    }
  }
  pending_.erase(pending_.begin(), pending_.begin() + n);
  return status;
}

absl::Status NonFiniteCheck::Failure(uint64_t id, const char* what) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "stage ", stage_, ", micro-batch ", id, ": ", what,
      " holds NaN or Inf (training diverged, or a neighbour sent bad values; "
      "lower the learning rate, or set training.non_finite to skip such "
      "micro-batches)"));
}

model::TensorPair ZerosLike(const model::TensorPair& p) {
  return {p.a.defined() ? torch::zeros_like(p.a) : torch::Tensor(),
          p.b.defined() ? torch::zeros_like(p.b) : torch::Tensor()};
}

}  // namespace petra::engine

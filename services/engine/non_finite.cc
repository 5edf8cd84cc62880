#include "services/engine/non_finite.h"

#include "absl/strings/str_cat.h"

namespace petra::engine {
namespace {

bool AllFinite(const model::TensorPair& p) {
  for (const torch::Tensor* t : {&p.a, &p.b}) {
    if (t->defined() && t->is_floating_point() &&
        !torch::isfinite(*t).all().item<bool>()) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status NonFiniteCheck::Check(const model::TensorPair& t, uint64_t id,
                                   const char* what, bool* skip) const {
  if (AllFinite(t)) return absl::OkStatus();
  if (skips()) {
    *skip = true;
    return absl::OkStatus();
  }
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

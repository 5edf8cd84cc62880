#include "services/engine/rebuild_error.h"

#include <algorithm>
#include <cmath>

namespace petra::engine {

double RelativeError(const model::TensorPair& x, const model::TensorPair& x2) {
  torch::NoGradGuard no_grad;
  // Squared norms in double, summed on the device; one read.
  torch::Tensor diff = torch::zeros({}, x.a.options().dtype(torch::kDouble));
  torch::Tensor base = diff.clone();
  for (auto [t, u] : {std::pair{&x.a, &x2.a}, std::pair{&x.b, &x2.b}}) {
    if (!t->defined()) continue;
    const torch::Tensor a = t->to(torch::kDouble);
    diff += (a - u->to(torch::kDouble)).pow(2).sum();
    base += a.pow(2).sum();
  }
  const torch::Tensor both = torch::stack({diff, base}).cpu();
  const double num = std::sqrt(both[0].item<double>());
  const double den = std::sqrt(both[1].item<double>());
  return den == 0 ? 0.0 : num / den;
}

void RebuildErrorProbe::Measure(const model::TensorPair& x,
                                const model::TensorPair& y,
                                StageBlocks& blocks) {
  const double e = RelativeError(x, blocks.Inverse(y));
  ++samples_;
  sum_ += e;
  max_ = std::max(max_, e);
}

RebuildErrorSummary RebuildErrorProbe::summary() const {
  RebuildErrorSummary s;
  s.samples = samples_;
  s.mean = samples_ == 0 ? 0.0 : sum_ / samples_;
  s.max = max_;
  return s;
}

}  // namespace petra::engine

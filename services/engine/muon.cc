#include "services/engine/muon.h"

#include <algorithm>
#include <cmath>

namespace petra::engine {

torch::Tensor Orthogonalize(const torch::Tensor& g, int steps) {
  torch::NoGradGuard no_grad;
  torch::Tensor x = g.reshape({g.size(0), -1}).to(torch::kFloat);
  // X X^T is the smaller square.
  const bool tall = x.size(0) > x.size(1);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  for (int i = 0; i < steps; ++i) {
    const torch::Tensor s = x.matmul(x.t());
    const torch::Tensor p = s * b + s.matmul(s) * c;
    x = x * a + p.matmul(x);
  }
  if (tall) x = x.t();
  return x.reshape(g.sizes()).to(g.scalar_type());
}

void MuonStep(torch::Tensor& param, const torch::Tensor& grad,
              torch::Tensor& buffer, double lr, double momentum,
              bool nesterov, double weight_decay) {
  torch::NoGradGuard no_grad;
  buffer.mul_(momentum).add_(grad);
  const torch::Tensor u = nesterov ? grad.add(buffer, momentum) : buffer;
  const int64_t rows = param.size(0);
  const int64_t cols = param.numel() / std::max<int64_t>(rows, 1);
  const double scale = 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  if (weight_decay != 0) param.mul_(1 - lr * weight_decay);
  param.add_(Orthogonalize(u), -lr * scale);
}

}  // namespace petra::engine

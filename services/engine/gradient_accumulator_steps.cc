// GradientAccumulator's own steps, beside torch's SGD and AdamW: spike-
// compensated SGD, NAdamW, Muon's matrices, and DC-ASGD's correction of the
// gradient with the weights' drift it reads (gradient_accumulator.h).
#include <cmath>

#include "services/engine/gradient_accumulator.h"
#include "services/engine/muon.h"
#include "services/torch_compat.h"

namespace petra::engine {

void GradientAccumulator::CompensatedStep(double lr) {
  torch::NoGradGuard no_grad;
  const auto [a, b] = spike_;
  for (auto& group : optimizer_->param_groups()) {
    const auto& o =
        static_cast<const torch::optim::SGDOptions&>(group.options());
    for (torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::Tensor g = p.grad();
      if (o.weight_decay() != 0) g = g.add(p, o.weight_decay());
      // As torch's SGD (no dampening): the first step's buffer is g.
      torch::Tensor v = Momentum(p);
      if (v.defined()) {
        v.mul_(o.momentum()).add_(g);
      } else {
        v = g.clone();
        SetMomentum(p, v);
      }
      p.add_(g, -lr * a).add_(v, -lr * b);
    }
  }
}

void GradientAccumulator::NAdamStep(double lr) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer_->param_groups()) {
    const auto& o =
        static_cast<const torch::optim::AdamWOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    for (torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& g = p.grad();
      auto& slot = optimizer_->state()[OptimizerStateKey(*optimizer_, p)];
      if (slot == nullptr) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p));
        s->exp_avg_sq(torch::zeros_like(p));
        slot = std::move(s);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      const int64_t t = s.step() + 1;
      s.step(t);
      if (o.weight_decay() != 0) p.mul_(1 - lr * o.weight_decay());
      const double bias2 = 1 - std::pow(beta2, static_cast<double>(t));
      const double mu =
          beta1 * (1 - 0.5 * std::pow(0.96, static_cast<double>(t) *
                                                momentum_decay_));
      const double mu_next =
          beta1 * (1 - 0.5 * std::pow(0.96, static_cast<double>(t + 1) *
                                                momentum_decay_));
      const double mu_product = MuProduct(t);
      s.exp_avg().lerp_(g, 1 - beta1);
      s.exp_avg_sq().mul_(beta2).addcmul_(g, g, 1 - beta2);
      const torch::Tensor denom = (s.exp_avg_sq() / bias2).sqrt().add_(o.eps());
      p.addcdiv_(g, denom, -lr * (1 - mu) / (1 - mu_product));
      p.addcdiv_(s.exp_avg(), denom,
                 -lr * mu_next / (1 - mu_product * mu_next));
    }
  }
}

void GradientAccumulator::MuonSteps(double lr) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : params_) {
    if (!IsMuon(p) || !p.grad().defined()) continue;
    torch::Tensor& buffer = muon_momentum_[p.unsafeGetTensorImpl()];
    if (!buffer.defined()) buffer = torch::zeros_like(p);
    MuonStep(p, p.grad(), buffer, lr, momentum_, nesterov_,
             muon_weight_decay_);
    // As zero_grad does for the others.
    p.mutable_grad() = torch::Tensor();
  }
}

double GradientAccumulator::MuProduct(int64_t t) const {
  const auto& o = static_cast<const torch::optim::AdamWOptions&>(
      optimizer_->param_groups().front().options());
  const double beta1 = std::get<0>(o.betas());
  while (static_cast<int64_t>(mu_products_.size()) <= t) {
    const double i = static_cast<double>(mu_products_.size());
    mu_products_.push_back(mu_products_.back() * beta1 *
                           (1 - 0.5 * std::pow(0.96, i * momentum_decay_)));
  }
  return mu_products_[t];
}

void GradientAccumulator::CompensateDelay() {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    torch::Tensor g = p.grad();
    torch::Tensor& ms = mean_square_[p.unsafeGetTensorImpl()];
    if (!ms.defined()) ms = torch::zeros_like(p);
    ms.mul_(kMeanSquareDecay).addcmul_(g, g, 1 - kMeanSquareDecay);
    const torch::Tensor drift = WeightDrift(p, delay_);
    if (!drift.defined()) continue;
    // lambda_t = lambda_0 / sqrt(MeanSquare); the 1e-12 keeps a parameter
    // whose gradients were all 0 so far at 0.
    g.add_(g * g * drift / (ms.sqrt() + 1e-12), dc_lambda_);
  }
}

torch::Tensor GradientAccumulator::WeightDrift(const torch::Tensor& param,
                                               double steps) const {
  auto it = drift_.find(param.unsafeGetTensorImpl());
  if (it == drift_.end()) return {};
  return it->second * steps;
}

}  // namespace petra::engine

#include "services/engine/gradient_accumulator.h"

#include <cmath>

#include "services/torch_compat.h"

namespace petra::engine {
namespace {

// Spike compensation's (a, b) for momentum m and delay d (job.proto,
// training.spike_compensation): a gradient applied d steps late gets at once
// the share of its step that momentum would have spread over those d steps,
// and the buffer carries the rest, so its total is still lr / (1 - m).
std::pair<double, double> SpikeCoefficients(double m, bool nesterov, double d) {
  if (m == 0) return {1.0, 0.0};
  if (nesterov) {
    const double b = std::pow(m, d + 1);
    return {1 + m * (1 - b) / (1 - m) - b, b};
  }
  const double b = std::pow(m, d);
  return {(1 - b) / (1 - m), b};
}

}  // namespace

GradientAccumulator::GradientAccumulator(std::vector<torch::Tensor> params,
                                         const petra::v1::JobSpec& resolved,
                                         LrSchedule schedule,
                                         double compensated_delay)
    : params_(std::move(params)),
      schedule_(std::move(schedule)),
      accumulation_(static_cast<int>(resolved.training().accumulation_steps())),
      compensated_(compensated_delay > 0),
      spike_(SpikeCoefficients(resolved.optimizer().momentum(),
                               resolved.optimizer().nesterov(),
                               compensated_delay)) {
  // Weight decay on convolution and linear weights only; never on BatchNorm
  // parameters or biases (the one-dimensional tensors).
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : params_) {
    (p.dim() > 1 ? decay : no_decay).push_back(p);
  }
  const petra::v1::OptimizerSpec& o = resolved.optimizer();
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(o.learning_rate())
            .momentum(o.momentum())
            .nesterov(o.nesterov())
            .weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, options(o.weight_decay()));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  if (!groups.empty()) {
    optimizer_ = std::make_unique<torch::optim::SGD>(
        groups, torch::optim::SGDOptions(o.learning_rate()));
  }
}

GradientAccumulator::~GradientAccumulator() = default;

void GradientAccumulator::Add(const std::vector<torch::Tensor>& params,
                              const std::vector<torch::Tensor>& grads) {
  if (holding_) {
    held_.emplace_back(params, grads);
    return;
  }
  AddNow(params, grads);
}

void GradientAccumulator::Hold() {
  held_.clear();
  holding_ = true;
}

void GradientAccumulator::Commit() {
  holding_ = false;
  for (const auto& [params, grads] : held_) AddNow(params, grads);
  held_.clear();
}

void GradientAccumulator::Drop() {
  holding_ = false;
  held_.clear();
}

void GradientAccumulator::AddNow(const std::vector<torch::Tensor>& params,
                                 const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  const double scale = 1.0 / accumulation_;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    torch::Tensor& acc = params[i].mutable_grad();
    if (acc.defined()) {
      acc.add_(grads[i], scale);
    } else {
      acc = grads[i] * scale;
    }
  }
}

void GradientAccumulator::FinishBackward(
    const std::function<void()>& before_step) {
  if (++pending_ < accumulation_) return;
  pending_ = 0;
  if (optimizer_ != nullptr) {
    const double lr = schedule_.At(steps_);
    for (auto& group : optimizer_->param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    }
    if (before_step) before_step();
    if (compensated_) {
      CompensatedStep(lr);
    } else {
      optimizer_->step();
    }
    optimizer_->zero_grad();
  }
  ++steps_;
}

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

int64_t GradientAccumulator::state_bytes() const {
  int64_t n = 0;
  for (const torch::Tensor& p : params_) {
    if (p.grad().defined()) n += p.grad().numel() * p.grad().element_size();
  }
  if (optimizer_ != nullptr) {
    for (const auto& [key, state] : optimizer_->state()) {
      const auto& s = static_cast<const torch::optim::SGDParamState&>(*state);
      if (s.momentum_buffer().defined()) {
        n += s.momentum_buffer().numel() * s.momentum_buffer().element_size();
      }
    }
  }
  return n;
}

torch::Tensor GradientAccumulator::Momentum(const torch::Tensor& p) const {
  if (optimizer_ == nullptr) return {};
  auto it = optimizer_->state().find(OptimizerStateKey(*optimizer_, p));
  if (it == optimizer_->state().end()) return {};
  return static_cast<const torch::optim::SGDParamState&>(*it->second)
      .momentum_buffer();
}

void GradientAccumulator::SetMomentum(const torch::Tensor& p,
                                      const torch::Tensor& buffer) {
  if (optimizer_ == nullptr) return;
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(buffer);
  optimizer_->state()[OptimizerStateKey(*optimizer_, p)] = std::move(s);
}

torch::Tensor GradientAccumulator::PredictedChange(const torch::Tensor& param,
                                                   double steps) const {
  const torch::Tensor v = Momentum(param);
  if (!v.defined()) return {};
  return v * (-steps * schedule_.At(steps_));
}

void GradientAccumulator::ResetCounters(int64_t steps) {
  steps_ = steps;
  pending_ = 0;
}

}  // namespace petra::engine

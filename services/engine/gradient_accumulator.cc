#include "services/engine/gradient_accumulator.h"

namespace petra::engine {

GradientAccumulator::GradientAccumulator(std::vector<torch::Tensor> params,
                                         const petra::v1::JobSpec& resolved,
                                         LrSchedule schedule)
    : params_(std::move(params)),
      schedule_(std::move(schedule)),
      accumulation_(
          static_cast<int>(resolved.training().accumulation_steps())) {
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
    optimizer_->step();
    optimizer_->zero_grad();
  }
  ++steps_;
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
  auto it =
      optimizer_->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
  if (it == optimizer_->state().end()) return {};
  return static_cast<const torch::optim::SGDParamState&>(*it->second)
      .momentum_buffer();
}

void GradientAccumulator::SetMomentum(const torch::Tensor& p,
                                      const torch::Tensor& buffer) {
  if (optimizer_ == nullptr) return;
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(buffer);
  optimizer_->state()[c10::guts::to_string(p.unsafeGetTensorImpl())] =
      std::move(s);
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

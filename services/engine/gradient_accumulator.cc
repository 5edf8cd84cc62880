#include "services/engine/gradient_accumulator.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "services/engine/replica_group.h"
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
                                         LrSchedule schedule, double delay,
                                         std::vector<bool> decays)
    : params_(std::move(params)),
      schedule_(std::move(schedule)),
      accumulation_(static_cast<int>(resolved.training().accumulation_steps())),
      kind_(resolved.optimizer().kind() ==
                        petra::v1::OptimizerSpec::KIND_ADAMW ||
                    resolved.optimizer().kind() ==
                        petra::v1::OptimizerSpec::KIND_NADAMW ||
                    resolved.optimizer().kind() ==
                        petra::v1::OptimizerSpec::KIND_MUON
                ? resolved.optimizer().kind()
                : petra::v1::OptimizerSpec::KIND_SGD),
      delay_(delay),
      compensated_(delay > 0 && resolved.training().spike_compensation()),
      spike_(SpikeCoefficients(resolved.optimizer().momentum(),
                               resolved.optimizer().nesterov(),
                               compensated_ ? delay : 0.0)),
      clip_norm_(resolved.optimizer().clip_grad_norm()),
      momentum_(resolved.optimizer().momentum()),
      nesterov_(resolved.optimizer().nesterov()),
      momentum_decay_(resolved.optimizer().momentum_decay()),
      dc_lambda_(delay > 0 ? resolved.training().delay_compensation() : 0.0),
      discrepancy_(delay > 0 && resolved.training().discrepancy_correction()),
      drift_decay_(resolved.training().weight_drift_decay()),
      tracks_drift_(dc_lambda_ > 0 || discrepancy_) {
  // Weight decay only where the caller says (or, without a say, on the
  // tensors of more than one dimension: convolution and linear weights).
  // Muon: the matrices among them go to Muon, the rest to AdamW.
  const petra::v1::OptimizerSpec& o = resolved.optimizer();
  const bool muon = kind_ == petra::v1::OptimizerSpec::KIND_MUON;
  muon_weight_decay_ = o.weight_decay();
  std::vector<torch::Tensor> decay, no_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool decays_i = decays.empty() ? params_[i].dim() > 1 : decays[i];
    if (muon && decays_i && params_[i].dim() >= 2) {
      muon_.insert(params_[i].unsafeGetTensorImpl());
      continue;
    }
    (decays_i ? decay : no_decay).push_back(params_[i]);
  }
  for (const torch::Tensor& p : decay) {
    weight_decay_[p.unsafeGetTensorImpl()] = o.weight_decay();
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto add_group = [&](const std::vector<torch::Tensor>& ps, double wd) {
    if (ps.empty()) return;
    if (adam_moments()) {
      groups.emplace_back(ps, std::make_unique<torch::optim::AdamWOptions>(
                                  torch::optim::AdamWOptions(o.learning_rate())
                                      .betas({o.beta1(), o.beta2()})
                                      .eps(o.eps())
                                      .weight_decay(wd)));
    } else {
      groups.emplace_back(ps, std::make_unique<torch::optim::SGDOptions>(
                                  torch::optim::SGDOptions(o.learning_rate())
                                      .momentum(o.momentum())
                                      .nesterov(o.nesterov())
                                      .weight_decay(wd)));
    }
  };
  add_group(decay, o.weight_decay());
  add_group(no_decay, 0.0);
  if (groups.empty()) return;
  if (adam_moments()) {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        groups, torch::optim::AdamWOptions(o.learning_rate()));
  } else {
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
  if (optimizer_ != nullptr || !muon_.empty()) {
    if (averager_ != nullptr) {
      std::vector<torch::Tensor> grads;
      for (torch::Tensor& p : params_) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        grads.push_back(p.grad());
      }
      averager_->Average(grads);
    }
    const double lr = schedule_.At(steps_);
    if (optimizer_ != nullptr) {
      for (auto& group : optimizer_->param_groups()) {
        group.options().set_lr(lr);
      }
    }
    if (dc_lambda_ > 0) CompensateDelay();
    if (clip_norm_ > 0) {
      std::vector<torch::Tensor> with_grad;
      for (const torch::Tensor& p : params_) {
        if (p.grad().defined()) with_grad.push_back(p);
      }
      if (!with_grad.empty()) {
        last_gradient_norm_ =
            torch::nn::utils::clip_grad_norm_(with_grad, clip_norm_);
        if (last_gradient_norm_ > clip_norm_) ++clipped_steps_;
      }
    }
    if (before_step) before_step();
    // The weights before the step, for delta (WeightDrift).
    std::vector<torch::Tensor> old;
    if (tracks_drift_) {
      for (const torch::Tensor& p : params_) old.push_back(p.detach().clone());
    }
    if (!muon_.empty()) MuonSteps(lr);
    if (optimizer_ != nullptr) {
      if (compensated_) {
        CompensatedStep(lr);
      } else if (kind_ == petra::v1::OptimizerSpec::KIND_NADAMW) {
        NAdamStep(lr);
      } else {
        optimizer_->step();
      }
      optimizer_->zero_grad();
    }
    if (tracks_drift_) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params_.size(); ++i) {
        torch::Tensor& d = drift_[params_[i].unsafeGetTensorImpl()];
        if (!d.defined()) d = torch::zeros_like(params_[i]);
        d.mul_(drift_decay_).add_(params_[i] - old[i], 1 - drift_decay_);
      }
    }
  }
  ++steps_;
}

const std::vector<std::string>& GradientAccumulator::StateFields(
    const torch::Tensor& param) const {
  static const auto* sgd = new std::vector<std::string>{"momentum_buffer"};
  if (IsMuon(param)) return *sgd;
  static const auto* adamw =
      new std::vector<std::string>{"exp_avg", "exp_avg_sq", "step"};
  static const auto* nadamw = new std::vector<std::string>{
      "exp_avg", "exp_avg_sq", "step", "mu_product"};
  switch (kind_) {
    case petra::v1::OptimizerSpec::KIND_ADAMW:
    case petra::v1::OptimizerSpec::KIND_MUON:
      return *adamw;
    case petra::v1::OptimizerSpec::KIND_NADAMW:
      return *nadamw;
    default:
      return *sgd;
  }
}

const torch::optim::OptimizerParamState* GradientAccumulator::FindState(
    const torch::Tensor& p) const {
  if (optimizer_ == nullptr) return nullptr;
  auto it = optimizer_->state().find(OptimizerStateKey(*optimizer_, p));
  if (it == optimizer_->state().end()) return nullptr;
  return it->second.get();
}

int64_t GradientAccumulator::state_bytes() const {
  int64_t n = 0;
  for (const torch::Tensor& p : params_) {
    if (p.grad().defined()) n += p.grad().numel() * p.grad().element_size();
    for (const torch::Tensor& t : StateTensors(p)) {
      n += t.numel() * t.element_size();
    }
  }
  for (const auto* m : {&drift_, &mean_square_, &muon_momentum_}) {
    for (const auto& [key, t] : *m) n += t.numel() * t.element_size();
  }
  return n;
}

torch::Tensor GradientAccumulator::Momentum(const torch::Tensor& p) const {
  if (IsMuon(p)) {
    auto it = muon_momentum_.find(p.unsafeGetTensorImpl());
    return it == muon_momentum_.end() ? torch::Tensor() : it->second;
  }
  if (adam_moments()) return {};
  const auto* s = FindState(p);
  if (s == nullptr) return {};
  return static_cast<const torch::optim::SGDParamState&>(*s).momentum_buffer();
}

void GradientAccumulator::SetMomentum(const torch::Tensor& p,
                                      const torch::Tensor& buffer) {
  if (IsMuon(p)) {
    muon_momentum_[p.unsafeGetTensorImpl()] = buffer;
    return;
  }
  if (optimizer_ == nullptr || adam_moments()) return;
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(buffer);
  optimizer_->state()[OptimizerStateKey(*optimizer_, p)] = std::move(s);
}

void GradientAccumulator::AppendState(const std::string& name,
                                      const torch::Tensor& p,
                                      NamedTensorList& out) const {
  // Gradients matter only part-way through a k-step accumulation.
  if (pending_ > 0 && p.grad().defined()) {
    out.emplace_back("grad." + name, p.grad());
  }
  for (const auto& [field, m] :
       {std::pair<const char*, const std::map<const void*, torch::Tensor>*>{
            "drift", &drift_},
        {"mean_square", &mean_square_}}) {
    auto it = m->find(p.unsafeGetTensorImpl());
    if (it != m->end()) {
      out.emplace_back("delay." + name + "." + field, it->second);
    }
  }
  const std::vector<torch::Tensor> tensors = StateTensors(p);
  if (tensors.empty()) return;
  const std::string prefix = "optimizer." + name + ".";
  const std::vector<std::string>& fields = StateFields(p);
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.emplace_back(prefix + fields[i], tensors[i]);
  }
  if (adam_moments() && !IsMuon(p)) {
    const auto& s =
        static_cast<const torch::optim::AdamWParamState&>(*FindState(p));
    out.emplace_back(
        prefix + "step",
        torch::tensor(static_cast<int64_t>(s.step()), torch::kInt64));
    if (kind_ == petra::v1::OptimizerSpec::KIND_NADAMW) {
      // torch.optim.NAdam's own field; here it follows from the step count.
      out.emplace_back(prefix + "mu_product",
                       torch::tensor(MuProduct(s.step()), torch::kFloat64));
    }
  }
}

std::vector<torch::Tensor> GradientAccumulator::StateTensors(
    const torch::Tensor& p) const {
  if (IsMuon(p)) {
    const torch::Tensor buffer = Momentum(p);
    if (!buffer.defined()) return {};
    return {buffer};
  }
  const auto* state = FindState(p);
  if (state == nullptr) return {};
  if (adam_moments()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
    return {s.exp_avg(), s.exp_avg_sq()};
  }
  const auto& s = static_cast<const torch::optim::SGDParamState&>(*state);
  if (!s.momentum_buffer().defined()) return {};
  return {s.momentum_buffer()};
}

absl::Status GradientAccumulator::LoadState(
    const std::map<std::string, torch::Tensor>& state, const std::string& name,
    const torch::Tensor& p) {
  torch::NoGradGuard no_grad;
  auto copy = [&](const torch::Tensor& t) {
    return t.to(p.device(), /*non_blocking=*/false, /*copy=*/true);
  };
  if (auto it = state.find("grad." + name); it != state.end()) {
    // A const handle to the same parameter: its .grad is shared.
    torch::Tensor q = p;
    q.mutable_grad() = copy(it->second);
  }
  for (const auto& [field, m] :
       {std::pair<const char*, std::map<const void*, torch::Tensor>*>{
            "drift", &drift_},
        {"mean_square", &mean_square_}}) {
    auto it = state.find("delay." + name + "." + field);
    if (it == state.end()) continue;
    if (it->second.sizes() != p.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint: tensor \"delay.", name, ".", field, "\" has shape ",
          c10::str(it->second.sizes()), ", the parameter ",
          c10::str(p.sizes())));
    }
    // Kept only where this job's corrections read it.
    if (tracks_drift_) (*m)[p.unsafeGetTensorImpl()] = copy(it->second);
  }
  const std::string prefix = "optimizer." + name + ".";
  std::map<std::string, torch::Tensor> fields;
  std::vector<std::string> missing;
  for (const std::string& field : StateFields(p)) {
    auto it = state.find(prefix + field);
    if (it == state.end()) {
      missing.push_back(field);
      continue;
    }
    const bool scalar = field == "step" || field == "mu_product";
    if (scalar ? it->second.numel() != 1 : it->second.sizes() != p.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: tensor \"", prefix, field, "\" has shape ",
                       c10::str(it->second.sizes()), ", the optimizer needs ",
                       scalar ? "one value" : c10::str(p.sizes())));
    }
    fields[field] = it->second;
  }
  if (fields.empty()) {
    // No state: saved before this parameter's first step. Another
    // optimizer's state is not that.
    for (const char* other : {"momentum_buffer", "exp_avg"}) {
      if (state.count(prefix + other) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: \"", prefix, other,
                         "\" is another optimizer's "
                         "state; this job's optimizer is ",
                         IsMuon(p) ? "muon"
                         : kind_ == petra::v1::OptimizerSpec::KIND_SGD ? "sgd"
                         : kind_ == petra::v1::OptimizerSpec::KIND_NADAMW
                             ? "nadamw"
                             : "adamw (muon: on its non-matrix parameters)"));
      }
    }
    return absl::OkStatus();
  }
  if (kind_ == petra::v1::OptimizerSpec::KIND_ADAMW &&
      state.count(prefix + "mu_product") > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: \"", prefix,
        "mu_product\" is another optimizer's state (nadamw); this job's "
        "optimizer is adamw"));
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: \"", prefix, missing.front(),
                     "\" is missing beside the rest of the optimizer state"));
  }
  if (IsMuon(p)) {
    SetMomentum(p, copy(fields["momentum_buffer"]));
    return absl::OkStatus();
  }
  if (optimizer_ == nullptr) return absl::OkStatus();
  if (adam_moments()) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(copy(fields["exp_avg"]));
    s->exp_avg_sq(copy(fields["exp_avg_sq"]));
    s->step(fields["step"].to(torch::kCPU).to(torch::kInt64).item<int64_t>());
    optimizer_->state()[OptimizerStateKey(*optimizer_, p)] = std::move(s);
  } else {
    SetMomentum(p, copy(fields["momentum_buffer"]));
  }
  return absl::OkStatus();
}

torch::Tensor GradientAccumulator::PredictedChange(const torch::Tensor& param,
                                                   double steps) const {
  const double lr = schedule_.At(steps_);
  if (!adam_moments()) {
    const torch::Tensor v = Momentum(param);
    if (!v.defined()) return {};
    return v * (-steps * lr);
  }
  const auto* state = FindState(param);
  if (state == nullptr) return {};
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
  const auto& o = static_cast<const torch::optim::AdamWOptions&>(
      optimizer_->param_groups().front().options());
  // As torch's AdamW computes its next step (t + 1).
  const double t = static_cast<double>(s.step()) + 1;
  const double bias1 = 1 - std::pow(std::get<0>(o.betas()), t);
  const double bias2 = 1 - std::pow(std::get<1>(o.betas()), t);
  torch::Tensor direction =
      (s.exp_avg() / bias1) / ((s.exp_avg_sq() / bias2).sqrt() + o.eps());
  auto wd = weight_decay_.find(param.unsafeGetTensorImpl());
  if (wd != weight_decay_.end() && wd->second != 0) {
    direction = direction + param.detach() * wd->second;
  }
  return direction * (-steps * lr);
}

void GradientAccumulator::ResetCounters(int64_t steps) {
  steps_ = steps;
  pending_ = 0;
}

}  // namespace petra::engine

#include "services/engine/stage_worker.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "services/model/batch_norm.h"

namespace petra::engine {
namespace {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

int64_t Bytes(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const torch::Tensor& t : ts) {
    if (t.defined()) n += t.numel() * t.element_size();
  }
  return n;
}

// One reduction per tensor: the check the non-finite policy costs.
bool AllFinite(const TensorPair& p) {
  for (const torch::Tensor* t : {&p.a, &p.b}) {
    if (t->defined() && t->is_floating_point() &&
        !torch::isfinite(*t).all().item<bool>()) {
      return false;
    }
  }
  return true;
}

TensorPair ZerosLike(const TensorPair& p) {
  return {p.a.defined() ? torch::zeros_like(p.a) : torch::Tensor(),
          p.b.defined() ? torch::zeros_like(p.b) : torch::Tensor()};
}

// Torch reports errors by exception; they end at the worker's boundary.
template <typename F>
auto Guard(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace

StageWorker::StageWorker(std::vector<std::shared_ptr<model::Block>> blocks,
                         StageConfig config, const petra::v1::JobSpec& resolved,
                         LrSchedule schedule)
    : blocks_(std::move(blocks)),
      config_(config),
      schedule_(std::move(schedule)),
      accumulation_(static_cast<int>(resolved.training().accumulation_steps())),
      non_finite_(resolved.training().non_finite()),
      diagnostics_every_(resolved.training().grad_diagnostics_every()) {
  bool all_reversible = true;
  for (const auto& b : blocks_) all_reversible &= b->reversible();
  rebuilds_ = all_reversible && !config_.stash_inputs;

  // Weight decay on convolution and linear weights only; never on BatchNorm
  // parameters or biases (the one-dimensional tensors).
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& b : blocks_) {
    for (const torch::Tensor& p : b->parameters()) {
      params_.push_back(p);
      (p.dim() > 1 ? decay : no_decay).push_back(p);
    }
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
  UpdatePeak();
}

StageWorker::~StageWorker() = default;

TensorPair StageWorker::ForwardBlocks(const TensorPair& x) {
  TensorPair y = x;
  for (const auto& b : blocks_) y = b->Forward(y);
  return y;
}

absl::StatusOr<TensorPair> StageWorker::Forward(uint64_t id,
                                                const TensorPair& x,
                                                int64_t tick) {
  return Guard("forward", [&]() -> absl::StatusOr<TensorPair> {
    if (records_.count(id) != 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("micro-batch ", id, " was already forwarded by stage ",
                       config_.index, " and not yet backwarded"));
    }
    Record r;
    r.tick = tick;
    r.step = steps_;
    if (absl::Status s = CheckFinite(x, id, "the input activation", &r.skipped);
        !s.ok()) {
      return s;
    }
    TensorPair y;
    {
      torch::NoGradGuard no_grad;
      ScopedBnMode mode(BnMode::kBatchStats);
      y = ForwardBlocks(x);
    }
    // A skipped forward still goes up, NaN and all: the stages above skip
    // it as well, and the ids stay in step.
    if (!r.skipped) {
      if (absl::Status s =
              CheckFinite(y, id, "the output activation", &r.skipped);
          !s.ok()) {
        return s;
      }
    }
    if (!rebuilds_) {
      r.input = x.detach();
      buffer_bytes_ += r.input.nbytes();
    }
    if (config_.stash_weights) {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& p : params_)
        r.weights.push_back(p.detach().clone());
      stash_bytes_ += Bytes(r.weights);
    }
    // One micro-batch per diagnostic period, wherever the backward may use
    // other weights than the forward did (no weight stash); kept apart from
    // the memory accounting.
    if (diagnostics_every_ > 0 && !config_.stash_weights &&
        steps_ % diagnostics_every_ == 0 && steps_ != last_diagnosed_step_) {
      torch::NoGradGuard no_grad;
      last_diagnosed_step_ = steps_;
      r.diagnostic_input = {x.a.detach().clone(), x.b.defined()
                                                      ? x.b.detach().clone()
                                                      : torch::Tensor()};
      for (const torch::Tensor& p : params_)
        r.diagnostic_weights.push_back(p.detach().clone());
    }
    records_.emplace(id, std::move(r));
    ++forwards_;
    UpdatePeak();
    return y;
  });
}

absl::StatusOr<StageWorker::Record> StageWorker::TakeRecord(uint64_t id) {
  auto it = records_.find(id);
  if (it == records_.end()) {
    return absl::NotFoundError(absl::StrCat("stage ", config_.index,
                                            " has no forward of micro-batch ",
                                            id, " waiting for its backward"));
  }
  Record r = std::move(it->second);
  records_.erase(it);
  buffer_bytes_ -= r.input.nbytes();
  stash_bytes_ -= Bytes(r.weights);
  return r;
}

// Reversible stage: for each block, from the last, rebuild a = y2 and
// R(a) with the current weights, b = y1 - R(a), and get delta_a and the
// parameter gradient from one vector-Jacobian product of R: one forward of R
// and one backward per block.
BackwardOutput StageWorker::Rebuild(const TensorPair& output,
                                    const TensorPair& output_grad) {
  TensorPair y = output.detach();
  TensorPair g = output_grad;
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    auto* block = dynamic_cast<model::ReversibleBlock*>(it->get());
    torch::Tensor a = block->Unsqueeze(y.b).detach().requires_grad_(true);
    torch::Tensor r;
    {
      ScopedBnMode mode(BnMode::kBatchStatsUpdateRunning);
      r = block->residual()->forward(a);
    }
    torch::Tensor b = block->Unsqueeze(y.a - r.detach());
    std::vector<torch::Tensor> block_params = block->parameters();
    std::vector<torch::Tensor> inputs = {a};
    inputs.insert(inputs.end(), block_params.begin(), block_params.end());
    std::vector<torch::Tensor> grads =
        torch::autograd::grad({r}, inputs, {g.a}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    // (a, b) -> (S(b) + R(a), S(a)): d/da = S^T dy2 + R'(a)^T dy1,
    // d/db = S^T dy1, and S^T = S^-1 (a permutation).
    torch::Tensor g2 = block->Unsqueeze(g.b);
    torch::Tensor da = grads[0].defined() ? g2 + grads[0] : g2;
    std::vector<torch::Tensor> param_grads(grads.begin() + 1, grads.end());
    Accumulate(block_params, param_grads);
    g = {da, block->Unsqueeze(g.a)};
    y = {a.detach(), b};
  }
  BackwardOutput out;
  out.input = y;
  out.input_grad = g;
  return out;
}

// Runs the blocks on `input` with a graph (updating BN running statistics:
// this is the backward recompute), lets `head` turn their output into the
// tensors to differentiate and their gradients, and takes one
// vector-Jacobian product. Parameter gradients are accumulated; the input
// gradient is returned (undefined on the first stage, whose input is data).
TensorPair StageWorker::Differentiate(const TensorPair& input,
                                      const Head& head) {
  const bool want_input_grad = config_.index > 0;
  TensorPair x{input.a.detach().requires_grad_(want_input_grad),
               input.b.defined()
                   ? input.b.detach().requires_grad_(want_input_grad)
                   : torch::Tensor()};
  TensorPair y;
  {
    ScopedBnMode mode(BnMode::kBatchStatsUpdateRunning);
    y = ForwardBlocks(x);
  }
  auto [outputs, grad_outputs] = head(y);
  if (outputs.empty()) {
    // Nothing to differentiate (a skipped micro-batch): zero gradients down.
    if (!want_input_grad) return {};
    return {torch::zeros_like(x.a),
            x.b.defined() ? torch::zeros_like(x.b) : torch::Tensor()};
  }
  std::vector<torch::Tensor> inputs;
  if (want_input_grad) {
    inputs.push_back(x.a);
    if (x.b.defined()) inputs.push_back(x.b);
  }
  const size_t first_param = inputs.size();
  inputs.insert(inputs.end(), params_.begin(), params_.end());
  std::vector<torch::Tensor> grads = torch::autograd::grad(
      outputs, inputs, grad_outputs, false, false, /*allow_unused=*/true);
  Accumulate(params_, std::vector<torch::Tensor>(grads.begin() + first_param,
                                                 grads.end()));
  if (!want_input_grad) return {};
  return {grads[0], x.b.defined() ? grads[1] : torch::Tensor()};
}

absl::StatusOr<BackwardOutput> StageWorker::Backward(
    uint64_t id, const TensorPair& output, const TensorPair& output_grad,
    int64_t tick) {
  return Guard("backward", [&]() -> absl::StatusOr<BackwardOutput> {
    absl::StatusOr<Record> r = TakeRecord(id);
    if (!r.ok()) return r.status();
    bool skip = r->skipped;
    if (!skip && rebuilds_) {
      if (absl::Status s = CheckFinite(
              output, id, "the activation received for the backward", &skip);
          !s.ok()) {
        return s;
      }
    }
    if (!skip) {
      if (absl::Status s =
              CheckFinite(output_grad, id, "the gradient received", &skip);
          !s.ok()) {
        return s;
      }
    }
    if (skip) {
      BackwardOutput out = SkippedBackward(*r, output);
      out.delay_ticks = tick - r->tick;
      out.staleness_steps = steps_ - r->step;
      delay_sum_ += out.delay_ticks;
      staleness_sum_ += out.staleness_steps;
      ++measured_;
      ++skipped_;
      FinishBackward();
      return out;
    }
    // The parameter gradients wait until the gradient going down is known
    // to be finite (skip policy).
    held_.clear();
    hold_gradients_ = skip_non_finite();
    // Stashed weights: run the backward with the weights the forward used,
    // then put the current ones back and apply the update to those.
    std::vector<torch::Tensor> current;
    if (!r->weights.empty()) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params_.size(); ++i) {
        current.push_back(params_[i].detach().clone());
        params_[i].detach().copy_(r->weights[i]);
      }
    }
    std::vector<torch::Tensor> before;
    if (!r->diagnostic_weights.empty()) {
      for (const torch::Tensor& p : params_) {
        before.push_back(p.grad().defined() ? p.grad().clone()
                                            : torch::zeros_like(p));
      }
    }
    BackwardOutput out;
    if (rebuilds_) {
      out = Rebuild(output, output_grad);
    } else {
      out.input = r->input;
      out.input_grad = Differentiate(r->input, [&](const TensorPair& y) {
        std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> og{
            {y.a}, {output_grad.a}};
        if (y.b.defined()) {
          og.first.push_back(y.b);
          og.second.push_back(output_grad.b);
        }
        return og;
      });
    }
    if (!current.empty()) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params_.size(); ++i)
        params_[i].detach().copy_(current[i]);
    }
    hold_gradients_ = false;
    bool bad = false;
    if (absl::Status s = CheckFinite(
            out.input_grad, id, "the gradient computed for the input", &bad);
        !s.ok()) {
      return s;
    }
    if (bad) {
      held_.clear();
      out.input_grad = ZerosLike(out.input_grad);
      ++skipped_;
    } else {
      CommitHeld();
      if (!before.empty()) Diagnose(*r, output_grad, before);
    }
    out.delay_ticks = tick - r->tick;
    out.staleness_steps = steps_ - r->step;
    delay_sum_ += out.delay_ticks;
    staleness_sum_ += out.staleness_steps;
    ++measured_;
    FinishBackward();
    return out;
  });
}

absl::StatusOr<LossOutput> StageWorker::ForwardLoss(uint64_t id,
                                                    const TensorPair& x,
                                                    const torch::Tensor& labels,
                                                    int64_t tick) {
  return Guard("forward-loss", [&]() -> absl::StatusOr<LossOutput> {
    held_.clear();
    hold_gradients_ = false;
    if (labels.dim() != 1 || labels.size(0) != x.a.size(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels: ", labels.numel(),
                       " labels for a micro-batch of ", x.a.size(0)));
    }
    bool skip_input = false;
    if (absl::Status s =
            CheckFinite(x, id, "the input activation", &skip_input);
        !s.ok()) {
      return s;
    }
    if (skip_input) {
      // Not even a forward: its recompute would take NaN into the BN
      // running statistics.
      LossOutput out;
      out.loss = std::numeric_limits<double>::quiet_NaN();
      out.samples = labels.size(0);
      out.backward.input = x.detach();
      if (config_.index > 0) out.backward.input_grad = ZerosLike(x);
      ++forwards_;
      ++measured_;
      ++skipped_;
      FinishBackward();
      return out;
    }
    hold_gradients_ = skip_non_finite();
    // Forward and backward are one step here: the forward is the recompute,
    // so it updates the BN running statistics.
    torch::Tensor logits, loss;
    bool finite = true;
    TensorPair input_grad = Differentiate(x, [&](const TensorPair& y) {
      logits = y.a;
      loss = torch::nn::functional::cross_entropy(logits, labels);
      finite = std::isfinite(loss.item<double>());
      using Result =
          std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>;
      return finite ? Result{{loss}, {}} : Result{};
    });
    hold_gradients_ = false;
    if (!finite && !skip_non_finite()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the loss of micro-batch ", id, " is ", loss.item<double>(),
          " (training diverged; lower the learning rate, or set "
          "training.non_finite to skip such micro-batches)"));
    }
    bool bad = !finite;
    if (finite) {
      if (absl::Status s = CheckFinite(
              input_grad, id, "the gradient computed for the input", &bad);
          !s.ok()) {
        return s;
      }
    }
    if (bad) {
      held_.clear();
      input_grad = ZerosLike(input_grad);
      ++skipped_;
    } else {
      CommitHeld();
    }
    LossOutput out;
    out.loss = loss.item<double>();
    out.samples = labels.size(0);
    out.correct = logits.argmax(1).eq(labels).sum().item<int64_t>();
    out.backward.input = x.detach();
    out.backward.input_grad = input_grad;
    (void)tick;
    ++forwards_;
    ++measured_;  // delay and staleness 0
    FinishBackward();
    return out;
  });
}

absl::StatusOr<TensorPair> StageWorker::Evaluate(const TensorPair& x) {
  return Guard("evaluate", [&]() -> absl::StatusOr<TensorPair> {
    torch::NoGradGuard no_grad;
    ScopedBnMode mode(BnMode::kRunningStats);
    return ForwardBlocks(x);
  });
}

absl::Status StageWorker::CheckFinite(const TensorPair& t, uint64_t id,
                                      const char* what, bool* skip) const {
  if (AllFinite(t)) return absl::OkStatus();
  if (skip_non_finite()) {
    *skip = true;
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "stage ", config_.index, ", micro-batch ", id, ": ", what,
      " holds NaN or Inf (training diverged, or a neighbour sent bad values; "
      "lower the learning rate, or set training.non_finite to skip such "
      "micro-batches)"));
}

BackwardOutput StageWorker::SkippedBackward(const Record& r,
                                            const TensorPair& output) {
  torch::NoGradGuard no_grad;
  BackwardOutput out;
  if (rebuilds_) {
    // The inverse alone, with batch statistics: the running ones stay as
    // they are.
    ScopedBnMode mode(BnMode::kBatchStats);
    TensorPair y = output.detach();
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
      auto* block = dynamic_cast<model::ReversibleBlock*>(it->get());
      torch::Tensor a = block->Unsqueeze(y.b);
      torch::Tensor b = block->Unsqueeze(y.a - block->residual()->forward(a));
      y = {a, b};
    }
    out.input = y;
  } else {
    out.input = r.input;
  }
  if (config_.index > 0) out.input_grad = ZerosLike(out.input);
  return out;
}

void StageWorker::Accumulate(const std::vector<torch::Tensor>& params,
                             const std::vector<torch::Tensor>& grads) {
  if (hold_gradients_) {
    held_.emplace_back(params, grads);
    return;
  }
  AddToGradients(params, grads);
}

void StageWorker::CommitHeld() {
  for (const auto& [params, grads] : held_) AddToGradients(params, grads);
  held_.clear();
}

void StageWorker::AddToGradients(const std::vector<torch::Tensor>& params,
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

void StageWorker::FinishBackward() {
  ++backwards_;
  if (++pending_ < accumulation_) {
    UpdatePeak();
    return;
  }
  pending_ = 0;
  if (optimizer_ != nullptr) {
    const double lr = schedule_.At(steps_);
    for (auto& group : optimizer_->param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    }
    UpdatePeak();  // gradients and momentum both held right now
    optimizer_->step();
    optimizer_->zero_grad();
  }
  ++steps_;
  UpdatePeak();
}

MemoryStats StageWorker::memory() const {
  MemoryStats m;
  m.parameters_bytes = Bytes(params_);
  for (const auto& b : blocks_) m.parameters_bytes += Bytes(b->buffers());
  for (const torch::Tensor& p : params_) {
    if (p.grad().defined())
      m.optimizer_state_bytes += p.grad().numel() * p.grad().element_size();
  }
  if (optimizer_ != nullptr) {
    for (const auto& [key, state] : optimizer_->state()) {
      const auto& s = static_cast<const torch::optim::SGDParamState&>(*state);
      if (s.momentum_buffer().defined()) {
        m.optimizer_state_bytes +=
            s.momentum_buffer().numel() * s.momentum_buffer().element_size();
      }
    }
  }
  m.activation_buffer_bytes = buffer_bytes_;
  m.weight_stash_bytes = stash_bytes_;
  m.peak_bytes = peak_bytes_;
  m.peak_activation_buffer_bytes = peak_buffer_bytes_;
  m.peak_weight_stash_bytes = peak_stash_bytes_;
  return m;
}

void StageWorker::UpdatePeak() {
  peak_buffer_bytes_ = std::max(peak_buffer_bytes_, buffer_bytes_);
  peak_stash_bytes_ = std::max(peak_stash_bytes_, stash_bytes_);
  MemoryStats m = memory();
  peak_bytes_ = std::max(peak_bytes_,
                         m.parameters_bytes + m.optimizer_state_bytes +
                             m.activation_buffer_bytes + m.weight_stash_bytes);
}

double StageWorker::delay_ticks_mean() const {
  return measured_ == 0 ? 0.0 : static_cast<double>(delay_sum_) / measured_;
}

double StageWorker::staleness_mean() const {
  return measured_ == 0 ? 0.0 : static_cast<double>(staleness_sum_) / measured_;
}

std::vector<torch::Tensor> StageWorker::state_tensors() const {
  std::vector<torch::Tensor> out = params_;
  for (const auto& b : blocks_) {
    for (const torch::Tensor& t : b->buffers()) out.push_back(t);
  }
  return out;
}

void StageWorker::Diagnose(const Record& r, const TensorPair& output_grad,
                           const std::vector<torch::Tensor>& before) {
  // PETRA's gradient of this micro-batch: what the backward just added.
  std::vector<torch::Tensor> petra;
  for (size_t i = 0; i < params_.size(); ++i) {
    petra.push_back(params_[i].grad().defined()
                        ? (params_[i].grad() - before[i]).flatten()
                        : torch::zeros({params_[i].numel()}));
  }
  // The exact delayed gradient: the forward's weights and input, the same
  // delta, BN with batch statistics and its running statistics untouched.
  std::vector<torch::Tensor> current;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      current.push_back(params_[i].detach().clone());
      params_[i].detach().copy_(r.diagnostic_weights[i]);
    }
  }
  TensorPair x{r.diagnostic_input.a.detach(),
               r.diagnostic_input.b.defined() ? r.diagnostic_input.b.detach()
                                              : torch::Tensor()};
  TensorPair y;
  {
    ScopedBnMode mode(BnMode::kBatchStats);
    y = ForwardBlocks(x);
  }
  // Only outputs that depend on the weights (a coupling passes one stream
  // through unchanged).
  std::vector<torch::Tensor> outputs, grads;
  for (const auto& [out, g] :
       {std::pair{y.a, output_grad.a}, std::pair{y.b, output_grad.b}}) {
    if (out.defined() && out.requires_grad()) {
      outputs.push_back(out);
      grads.push_back(g);
    }
  }
  std::vector<torch::Tensor> exact = torch::autograd::grad(
      outputs, params_, grads, false, false, /*allow_unused=*/true);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].detach().copy_(current[i]);
  }
  torch::Tensor p = torch::cat(petra);
  std::vector<torch::Tensor> flat;
  for (size_t i = 0; i < exact.size(); ++i) {
    flat.push_back(exact[i].defined() ? exact[i].flatten() / accumulation_
                                      : torch::zeros({params_[i].numel()}));
  }
  torch::Tensor e = torch::cat(flat);
  const double pn = p.norm().item<double>(), en = e.norm().item<double>();
  GradientDiagnostic d;
  d.step = steps_;
  d.cosine_similarity =
      pn > 0 && en > 0 ? p.dot(e).item<double>() / (pn * en) : 0.0;
  d.norm_ratio = en > 0 ? pn / en : 0.0;
  last_diagnostic_ = d;
}

absl::StatusOr<LossOutput> StageWorker::EvaluateLoss(
    const TensorPair& x, const torch::Tensor& labels) {
  absl::StatusOr<TensorPair> y = Evaluate(x);
  if (!y.ok()) return y.status();
  return Guard("evaluate", [&]() -> absl::StatusOr<LossOutput> {
    if (labels.dim() != 1 || labels.size(0) != y->a.size(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels: ", labels.numel(),
                       " labels for a micro-batch of ", y->a.size(0)));
    }
    LossOutput out;
    out.loss =
        torch::nn::functional::cross_entropy(y->a, labels).item<double>();
    out.correct = y->a.argmax(1).eq(labels).sum().item<int64_t>();
    out.samples = labels.size(0);
    return out;
  });
}

std::vector<std::pair<std::string, torch::Tensor>> StageWorker::NamedState(
    bool with_optimizer) const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::map<const void*, std::string> names;  // parameter -> name
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const std::string prefix =
        absl::StrCat("blocks.", config_.first_block + i, ".");
    for (const auto& p : blocks_[i]->named_parameters()) {
      out.emplace_back(prefix + p.key(), p.value().detach());
      names[p.value().unsafeGetTensorImpl()] = prefix + p.key();
    }
    for (const auto& b : blocks_[i]->named_buffers()) {
      out.emplace_back(prefix + b.key(), b.value().detach());
    }
  }
  if (!with_optimizer) return out;
  for (const torch::Tensor& p : params_) {
    const std::string& name = names[p.unsafeGetTensorImpl()];
    // Gradients matter only part-way through a k-step accumulation.
    if (pending_ > 0 && p.grad().defined()) {
      out.emplace_back("grad." + name, p.grad());
    }
    if (optimizer_ == nullptr) continue;
    auto it =
        optimizer_->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == optimizer_->state().end()) continue;
    const auto& s =
        static_cast<const torch::optim::SGDParamState&>(*it->second);
    if (s.momentum_buffer().defined()) {
      out.emplace_back("optimizer." + name + ".momentum_buffer",
                       s.momentum_buffer());
    }
  }
  return out;
}

absl::Status StageWorker::LoadNamedState(
    const std::map<std::string, torch::Tensor>& state, int64_t steps) {
  return Guard("restore", [&]() -> absl::Status {
    torch::NoGradGuard no_grad;
    auto find =
        [&](const std::string& name,
            const torch::Tensor& like) -> absl::StatusOr<torch::Tensor> {
      auto it = state.find(name);
      if (it == state.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: tensor \"", name, "\" is missing"));
      }
      if (it->second.sizes() != like.sizes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: tensor \"", name, "\" has shape ",
                         c10::str(it->second.sizes()), ", the model needs ",
                         c10::str(like.sizes())));
      }
      return it->second;
    };
    // Check everything before changing anything.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
    for (const auto& [name, t] : NamedState(false)) {
      absl::StatusOr<torch::Tensor> src = find(name, t);
      if (!src.ok()) return src.status();
      copies.emplace_back(t, *src);
    }
    for (auto& [dst, src] : copies) dst.copy_(src);
    for (const auto& [name, p] : NamedState(false)) {
      if (auto it = state.find("grad." + name); it != state.end()) {
        for (const torch::Tensor& q : params_) {
          if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl())
            q.mutable_grad() = it->second.clone();
        }
      }
    }
    if (optimizer_ != nullptr) {
      std::map<const void*, std::string> names;
      for (size_t i = 0; i < blocks_.size(); ++i) {
        for (const auto& p : blocks_[i]->named_parameters()) {
          names[p.value().unsafeGetTensorImpl()] =
              absl::StrCat("blocks.", config_.first_block + i, ".", p.key());
        }
      }
      for (const torch::Tensor& p : params_) {
        auto it = state.find("optimizer." + names[p.unsafeGetTensorImpl()] +
                             ".momentum_buffer");
        if (it == state.end()) continue;
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(it->second.clone());
        optimizer_->state()[c10::guts::to_string(p.unsafeGetTensorImpl())] =
            std::move(s);
      }
    }
    steps_ = steps;
    pending_ = 0;
    UpdatePeak();
    return absl::OkStatus();
  });
}

}  // namespace petra::engine

// A stage's parameter update: gradients of k micro-batches averaged,
// optionally corrected for their delay and clipped to a norm, then one
// optimizer step (SGD with Nesterov momentum, AdamW, NAdamW or Muon; weight
// decay on convolution and linear weights only) at the schedule's learning
// rate.
// Every backward program adds its gradients here, whatever way it computed
// them.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "petra/v1/job.pb.h"
#include "services/engine/lr_schedule.h"

namespace petra::engine {

class GradientAverager;

class GradientAccumulator {
 public:
  using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;

  // `params`: the stage's parameters, in block order. `delay`: D, how many
  // optimizer steps late the stage's gradients arrive (0: none, or not
  // delayed), which the spec's corrections act across: spike_compensation
  // (the missed momentum steps applied at once; SGD only),
  // delay_compensation and discrepancy_correction (through the weights'
  // drift, WeightDrift). `decays`: which parameters take weight decay, one
  // flag each (model::TakesWeightDecay); empty: those of more than one
  // dimension.
  GradientAccumulator(std::vector<torch::Tensor> params,
                      const petra::v1::JobSpec& resolved, LrSchedule schedule,
                      double delay = 0.0, std::vector<bool> decays = {});
  ~GradientAccumulator();

  // Adds (1/k) x `grads` to `params`' .grad (undefined grads are skipped).
  // While held, they are kept aside instead, until the micro-batch is known
  // to be finite (the skip policy): Commit adds them, Drop forgets them.
  void Add(const std::vector<torch::Tensor>& params,
           const std::vector<torch::Tensor>& grads);
  void Hold();
  void Commit();
  void Drop();

  // One backward pass is done: on the k-th, the optimizer steps and the sum
  // is cleared. `before_step` runs just before the step, when gradients and
  // momentum are both held (the memory peak).
  // With replicas (set_averager), the gradients are first averaged over
  // them: a parameter without a gradient takes part as zeros.
  void FinishBackward(const std::function<void()>& before_step);
  // The stage's replica group (replica_group.h), or null; not owned.
  void set_averager(GradientAverager* averager) { averager_ = averager; }
  GradientAverager* averager() const { return averager_; }

  int64_t steps() const { return steps_; }
  // Steps whose gradient norm was over optimizer.clip_grad_norm (scaled
  // down), and the norm before clipping of the last step (0 when off).
  int64_t clipped_steps() const { return clipped_steps_; }
  double last_gradient_norm() const { return last_gradient_norm_; }
  // The rate of the next optimizer step: the schedule's, times this stage's
  // delay factor (schedule.delay_lr_power).
  double learning_rate() const { return schedule_.At(steps_); }
  // The step's coefficients of the gradient g (weight decay included) and
  // of the updated momentum buffer v: the step is -lr (a g + b v). Plain
  // SGD: a = 1, b = m with Nesterov; a = 0, b = 1 without.
  double gradient_coefficient() const { return spike_.first; }
  double momentum_coefficient() const { return spike_.second; }
  // Backward passes accumulated since the last step.
  int64_t pending() const { return pending_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // The optimizer's state and the accumulated gradients, in bytes.
  int64_t state_bytes() const;
  // The SGD momentum buffer of `param`; undefined with AdamW, or before the
  // first step.
  torch::Tensor Momentum(const torch::Tensor& param) const;
  void SetMomentum(const torch::Tensor& param, const torch::Tensor& buffer);

  // What a checkpoint keeps of `param` (its name: `name`): "grad.<name>"
  // part-way through a k-step accumulation, and "optimizer.<name>.<field>"
  // for each field of its optimizer state, named as torch.optim names them
  // (SGD: momentum_buffer; AdamW: exp_avg, exp_avg_sq and step, an int64
  // scalar; NAdamW: AdamW's and mu_product, a scalar), and
  // "delay.<name>.drift" and "delay.<name>.mean_square" for the delay
  // corrections' state. Nothing before the first step.
  void AppendState(const std::string& name, const torch::Tensor& param,
                   NamedTensorList& out) const;
  // Restores what AppendState kept. A state with some of the optimizer's
  // fields but not all (another optimizer's checkpoint) is refused.
  absl::Status LoadState(const std::map<std::string, torch::Tensor>& state,
                         const std::string& name, const torch::Tensor& param);

  // How far `param` moves over the next `steps` optimizer steps if its
  // optimizer state stays as it is; lr is the next step's. SGD: -steps x lr
  // x v, v the momentum buffer (in steady state SGD moves a parameter by
  // lr x v a step, with Nesterov or without). AdamW: -steps x lr x (m^ /
  // (sqrt(v^) + eps) + wd x p), its next step's direction with the moments
  // m and v bias-corrected as that step will. Undefined where there is no
  // state yet.
  torch::Tensor PredictedChange(const torch::Tensor& param, double steps) const;
  // After a restore: `steps` taken, nothing pending.
  void ResetCounters(int64_t steps);

  // The stage's delay D in optimizer steps, as constructed.
  double delay() const { return delay_; }
  // How far `param` is estimated to have moved over the last `steps`
  // optimizer steps: steps x delta, delta the average of its recent steps
  // (training.weight_drift_decay). Undefined when no correction tracks it
  // (delay_compensation and discrepancy_correction off, or no delay), or
  // before the first step.
  torch::Tensor WeightDrift(const torch::Tensor& param, double steps) const;
  // Whether the backward runs at the weights the forward is estimated to
  // have had (training.discrepancy_correction, with a delay).
  bool corrects_discrepancy() const { return discrepancy_; }

 private:
  void AddNow(const std::vector<torch::Tensor>& params,
              const std::vector<torch::Tensor>& grads);
  // torch's SGD step with the coefficients of spike_ (same momentum buffers,
  // so checkpoints and weight prediction see no difference).
  void CompensatedStep(double lr);
  // torch.optim.NAdam's step with decoupled weight decay, on AdamW's state
  // (the same moments and step count; mu_product follows from the count).
  void NAdamStep(double lr);
  // Muon's step of every matrix with a gradient (muon.h).
  void MuonSteps(double lr);
  // prod_{i <= t} mu_i, mu_i = beta1 (1 - 0.5 x 0.96^(i psi)).
  double MuProduct(int64_t t) const;
  // DC-ASGD-a's correction of every parameter's gradient by its drift over
  // the delay (training.delay_compensation).
  void CompensateDelay();
  // AdamW's state for (some of) the parameters: AdamW, NAdamW, and Muon's
  // parameters that are not matrices.
  bool adam_moments() const {
    return kind_ != petra::v1::OptimizerSpec::KIND_SGD;
  }
  // Whether Muon steps `param` (optimizer kind muon, a weight matrix).
  bool IsMuon(const torch::Tensor& param) const {
    return muon_.count(param.unsafeGetTensorImpl()) > 0;
  }
  const std::vector<std::string>& StateFields(const torch::Tensor& param) const;

  std::vector<torch::Tensor> params_;
  LrSchedule schedule_;
  const int accumulation_;
  const petra::v1::OptimizerSpec::Kind kind_;
  const double delay_;
  const bool compensated_;
  // (a, b) of gradient_coefficient() and momentum_coefficient().
  std::pair<double, double> spike_;
  // The state's fields of `param`, in AppendState's order: StateTensors'
  // names, then AdamW's step count (and NAdamW's mu_product).
  // The optimizer's tensors for `param` (momentum, or AdamW's two moments);
  // empty before its first step. What state_bytes counts, without building
  // names or the step's scalar (it runs on every micro-batch).
  std::vector<torch::Tensor> StateTensors(const torch::Tensor& param) const;
  const torch::optim::OptimizerParamState* FindState(
      const torch::Tensor& param) const;

  const double clip_norm_;
  // SGD's and Muon's.
  const double momentum_;
  const bool nesterov_;
  const double momentum_decay_;
  // MuProduct's, cached by t (a cache: mutable).
  mutable std::vector<double> mu_products_{1.0};
  // DC-ASGD's lambda_0 (0: off) and the decay of its mean square.
  const double dc_lambda_;
  static constexpr double kMeanSquareDecay = 0.95;
  const bool discrepancy_;
  // gamma of delta's average; delta tracked only when a correction reads
  // it.
  const double drift_decay_;
  const bool tracks_drift_;
  // Muon's matrices, its decoupled weight decay and momentum buffers (the
  // rest are in optimizer_).
  std::set<const void*> muon_;
  double muon_weight_decay_ = 0;
  std::map<const void*, torch::Tensor> muon_momentum_;
  // Per parameter: delta, and DC-ASGD's MeanSquare(g).
  std::map<const void*, torch::Tensor> drift_;
  std::map<const void*, torch::Tensor> mean_square_;
  // torch::optim::SGD, or torch::optim::AdamW (which holds NAdamW's state
  // too: NAdamStep steps it).
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  // The parameters that take weight decay (AdamW's PredictedChange).
  std::map<const void*, double> weight_decay_;
  int64_t steps_ = 0;
  int64_t clipped_steps_ = 0;
  double last_gradient_norm_ = 0;
  int64_t pending_ = 0;
  GradientAverager* averager_ = nullptr;
  bool holding_ = false;
  std::vector<std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>>
      held_;
};

}  // namespace petra::engine

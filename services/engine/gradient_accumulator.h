// A stage's parameter update: gradients of k micro-batches averaged, then one
// SGD step (Nesterov momentum, weight decay on convolution and linear
// weights only) at the schedule's learning rate. Every backward program adds
// its gradients here, whatever way it computed them.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "petra/v1/job.pb.h"
#include "services/engine/lr_schedule.h"

namespace petra::engine {

class GradientAccumulator {
 public:
  // `params`: the stage's parameters, in block order. `compensated_delay`:
  // the delay D, in optimizer steps, whose missed momentum steps each step
  // applies at once (training.spike_compensation); 0 = plain SGD.
  GradientAccumulator(std::vector<torch::Tensor> params,
                      const petra::v1::JobSpec& resolved, LrSchedule schedule,
                      double compensated_delay = 0.0);
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
  void FinishBackward(const std::function<void()>& before_step);

  int64_t steps() const { return steps_; }
  // The step's coefficients of the gradient g (weight decay included) and
  // of the updated momentum buffer v: the step is -lr (a g + b v). Plain
  // SGD: a = 1, b = m with Nesterov; a = 0, b = 1 without.
  double gradient_coefficient() const { return spike_.first; }
  double momentum_coefficient() const { return spike_.second; }
  // Backward passes accumulated since the last step.
  int64_t pending() const { return pending_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // Momentum buffers and accumulated gradients.
  int64_t state_bytes() const;
  // The momentum buffer of `param`, undefined when it has none yet.
  torch::Tensor Momentum(const torch::Tensor& param) const;
  void SetMomentum(const torch::Tensor& param, const torch::Tensor& buffer);
  // How far `param` moves over the next `steps` optimizer steps if its
  // momentum buffer v stays as it is: -steps x lr x v (in steady state SGD
  // moves a parameter by lr x v a step, with Nesterov or without; lr is the
  // next step's). Undefined where there is no buffer yet.
  torch::Tensor PredictedChange(const torch::Tensor& param, double steps) const;
  // After a restore: `steps` taken, nothing pending.
  void ResetCounters(int64_t steps);

 private:
  void AddNow(const std::vector<torch::Tensor>& params,
              const std::vector<torch::Tensor>& grads);
  // torch's SGD step with the coefficients of spike_ (same momentum buffers,
  // so checkpoints and weight prediction see no difference).
  void CompensatedStep(double lr);

  std::vector<torch::Tensor> params_;
  LrSchedule schedule_;
  const int accumulation_;
  const bool compensated_;
  // (a, b) of gradient_coefficient() and momentum_coefficient().
  std::pair<double, double> spike_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  int64_t steps_ = 0;
  int64_t pending_ = 0;
  bool holding_ = false;
  std::vector<std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>>
      held_;
};

}  // namespace petra::engine

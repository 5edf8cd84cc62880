// One stage of the pipeline and Algorithm 1's work on it: forward of a
// micro-batch, backward of an (output, gradient) pair by rebuilding the input
// (reversible stages) or recomputing from a buffered input, gradient
// accumulation over k micro-batches and the optimizer step. No transport and
// no scheduling here: a runner (in-process or the stage server) decides what
// runs when, so the same object serves both.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/engine/lr_schedule.h"
#include "services/model/blocks.h"

namespace petra::engine {

struct StageConfig {
  int index = 0;  // 0-based position in the chain
  int count = 1;  // stages in the chain
  // Keep every input until its backward even when the stage could rebuild
  // it (delayed mode with stash_inputs). Non-reversible stages always keep.
  bool stash_inputs = false;
  // Keep a copy of the weights each forward used; backward runs with it.
  bool stash_weights = false;
  // Index of the stage's first block in the whole network (state names).
  int first_block = 0;
};

struct MemoryStats {
  int64_t parameters_bytes = 0;       // parameters and BN running statistics
  int64_t optimizer_state_bytes = 0;  // momentum buffers and accumulated grads
  int64_t activation_buffer_bytes = 0;
  int64_t weight_stash_bytes = 0;
  int64_t peak_bytes = 0;  // highest sum of the four since construction
  int64_t peak_activation_buffer_bytes = 0;
  int64_t peak_weight_stash_bytes = 0;
};

struct BackwardOutput {
  model::TensorPair input;       // x~_{j-1}: rebuilt or buffered input
  model::TensorPair input_grad;  // delta_j; undefined on the first stage
  int64_t delay_ticks = 0;       // ticks between this forward and backward
  int64_t staleness_steps = 0;   // optimizer steps taken in between
};

// PETRA's parameter gradient for one micro-batch against the exact delayed
// gradient (the input and weights its forward used, the same delta).
struct GradientDiagnostic {
  int64_t step = 0;
  double cosine_similarity = 0;
  double norm_ratio = 0;  // |PETRA| / |exact|
};

struct LossOutput {
  double loss = 0;  // mean over the micro-batch
  int64_t correct = 0;
  int64_t samples = 0;
  BackwardOutput backward;
};

class StageWorker {
 public:
  StageWorker(std::vector<std::shared_ptr<model::Block>> blocks,
              StageConfig config, const petra::v1::JobSpec& resolved,
              LrSchedule schedule);
  ~StageWorker();

  // True when backward rebuilds the input from the output (every block
  // reversible and inputs not stashed): nothing is kept between the two.
  bool rebuilds_input() const { return rebuilds_; }
  bool last() const { return config_.index == config_.count - 1; }
  int index() const { return config_.index; }
  int count() const { return config_.count; }

  // NaN and Inf at the stage boundary (training.non_finite): each tensor
  // that comes in or goes out of Forward, Backward and ForwardLoss is checked
  // (one isfinite().all() reduction each). With the fail policy the call
  // fails with FAILED_PRECONDITION naming the stage, micro-batch and tensor.
  // With the skip policy the micro-batch is skipped on this stage: a
  // non-finite forward still goes up (so the stages above skip it too), and
  // its backward accumulates nothing, leaves the BN running statistics
  // alone and sends zero gradients down with the input x~_{j-1} (rebuilt
  // without a graph, or buffered), so the stages below skip it or add zero.

  // Training forward of micro-batch `id` at `tick`. Batch statistics;
  // running statistics untouched.
  absl::StatusOr<model::TensorPair> Forward(uint64_t id,
                                            const model::TensorPair& x,
                                            int64_t tick);
  // Backward of micro-batch `id`: `output` is this stage's output x~_j
  // (rebuilt by the next stage or its buffer), `output_grad` delta_{j+1}.
  absl::StatusOr<BackwardOutput> Backward(uint64_t id,
                                          const model::TensorPair& output,
                                          const model::TensorPair& output_grad,
                                          int64_t tick);
  // Last stage: forward, cross-entropy loss and backward in one step. A
  // NaN or infinite loss (or input, or gradient going down) fails
  // (FAILED_PRECONDITION) or, when the spec says so, skips the micro-batch:
  // nothing accumulated, zero gradients down.
  absl::StatusOr<LossOutput> ForwardLoss(uint64_t id,
                                         const model::TensorPair& x,
                                         const torch::Tensor& labels,
                                         int64_t tick);
  // Evaluation forward: no gradients, running statistics.
  absl::StatusOr<model::TensorPair> Evaluate(const model::TensorPair& x);
  // Last stage: evaluation forward, mean cross-entropy and correct count
  // (no backward; `backward` stays empty).
  absl::StatusOr<LossOutput> EvaluateLoss(const model::TensorPair& x,
                                          const torch::Tensor& labels);

  MemoryStats memory() const;
  int64_t optimizer_steps() const { return steps_; }
  int64_t forward_count() const { return forwards_; }
  int64_t backward_count() const { return backwards_; }
  // Micro-batches this stage skipped for NaN or Inf (skip policy).
  int64_t skipped_count() const { return skipped_; }
  double delay_ticks_mean() const;
  double staleness_mean() const;
  // Micro-batches forwarded and not yet backwarded.
  int64_t in_flight() const { return static_cast<int64_t>(records_.size()); }
  std::vector<torch::Tensor> parameters() const { return params_; }
  // The newest gradient diagnostic (training.grad_diagnostics_every), if any.
  std::optional<GradientDiagnostic> last_diagnostic() const {
    return last_diagnostic_;
  }
  // Parameters then BN running statistics, in block order (checkpoints).
  std::vector<torch::Tensor> state_tensors() const;

  // The stage's state by name: "blocks.<i>.<parameter or buffer>" with i the
  // block's index in the whole network (the export's names), and with
  // `with_optimizer` also "optimizer.<same name>.momentum_buffer" and the
  // accumulated gradients "grad.<same name>" (checkpoints).
  std::vector<std::pair<std::string, torch::Tensor>> NamedState(
      bool with_optimizer) const;
  // Restores what NamedState(true) returned and the step counter. Every
  // model tensor must be present with its shape; INVALID_ARGUMENT naming the
  // first one that is not.
  absl::Status LoadNamedState(const std::map<std::string, torch::Tensor>& state,
                              int64_t steps);

 private:
  struct Record {
    int64_t tick = 0;
    int64_t step = 0;
    model::TensorPair input;             // when buffered
    std::vector<torch::Tensor> weights;  // when stashed
    // For a gradient diagnostic: the forward's input and weights.
    model::TensorPair diagnostic_input;
    std::vector<torch::Tensor> diagnostic_weights;
    // Its forward met NaN or Inf (skip policy): the backward is skipped too.
    bool skipped = false;
  };

  model::TensorPair ForwardBlocks(const model::TensorPair& x);
  absl::StatusOr<Record> TakeRecord(uint64_t id);
  // Gradients of one micro-batch, averaged over k; steps when k are in.
  // While hold_gradients_ is set they are kept aside (held_) instead, until
  // the micro-batch is known to be finite: CommitHeld adds them.
  void Accumulate(const std::vector<torch::Tensor>& params,
                  const std::vector<torch::Tensor>& grads);
  void AddToGradients(const std::vector<torch::Tensor>& params,
                      const std::vector<torch::Tensor>& grads);
  void CommitHeld();
  bool skip_non_finite() const {
    return non_finite_ ==
           petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH;
  }
  // OK when every element of `t` is finite; otherwise FAILED_PRECONDITION
  // (fail policy) naming `what`, or `*skip` set (skip policy).
  absl::Status CheckFinite(const model::TensorPair& t, uint64_t id,
                           const char* what, bool* skip) const;
  // A skipped micro-batch's backward: x~_{j-1} without a graph or BN update,
  // zero gradients.
  BackwardOutput SkippedBackward(const Record& r,
                                 const model::TensorPair& output);
  void FinishBackward();
  BackwardOutput Rebuild(const model::TensorPair& output,
                         const model::TensorPair& output_grad);
  // Maps the blocks' output to (tensors to differentiate, their gradients).
  using Head = std::function<
      std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>(
          const model::TensorPair&)>;
  model::TensorPair Differentiate(const model::TensorPair& input,
                                  const Head& head);
  void UpdatePeak();
  // The exact delayed gradient of `r` against PETRA's, just accumulated
  // into the parameters' .grad on top of `before`.
  void Diagnose(const Record& r, const model::TensorPair& output_grad,
                const std::vector<torch::Tensor>& before);

  std::vector<std::shared_ptr<model::Block>> blocks_;
  StageConfig config_;
  LrSchedule schedule_;
  int accumulation_;
  petra::v1::TrainingSpec::NonFinitePolicy non_finite_;
  bool rebuilds_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  std::map<uint64_t, Record> records_;
  int64_t buffer_bytes_ = 0;
  int64_t stash_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t peak_buffer_bytes_ = 0;
  int64_t peak_stash_bytes_ = 0;
  int64_t steps_ = 0;
  int64_t pending_ = 0;  // backward passes accumulated since the last step
  int64_t forwards_ = 0;
  int64_t backwards_ = 0;
  int64_t skipped_ = 0;
  bool hold_gradients_ = false;
  std::vector<std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>>
      held_;
  int64_t delay_sum_ = 0;
  int64_t staleness_sum_ = 0;
  int64_t measured_ = 0;
  int64_t diagnostics_every_ = 0;
  int64_t last_diagnosed_step_ = -1;
  std::optional<GradientDiagnostic> last_diagnostic_;
};

}  // namespace petra::engine

// One stage of the pipeline and Algorithm 1's work on it: forward of a
// micro-batch, backward of an (output, gradient) pair through the stage's
// backward program (backward_program.h: rebuild, recompute, stashed
// weights), the last stage's loss step, and the checks at its boundary. The
// parts are units of their own: the update (gradient_accumulator.h), memory
// (stage_memory.h), the gradient diagnostic (gradient_diagnostic.h), state
// names (stage_state.h). No transport and no scheduling here: a runner
// (in-process or the stage server) decides what runs when, so the same
// object serves both.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/engine/backward_program.h"
#include "services/engine/end_to_end_check.h"
#include "services/engine/gradient_accumulator.h"
#include "services/engine/gradient_diagnostic.h"
#include "services/engine/lr_schedule.h"
#include "services/engine/non_finite.h"
#include "services/engine/rebuild_error.h"
#include "services/engine/stage_blocks.h"
#include "services/engine/stage_boundary.h"
#include "services/engine/stage_memory.h"
#include "services/engine/stage_state.h"
#include "services/model/blocks.h"
#include "services/model/host_memory.h"

namespace petra::engine {

class ModeOps;

struct StageConfig {
  int index = 0;  // 0-based position in the chain
  int count = 1;  // stages in the chain
  // Keep every input until its backward even when the stage could rebuild
  // it (delayed mode with stash_inputs). Non-reversible stages always keep.
  bool stash_inputs = false;
  // Keep a copy of the weights each forward used; backward runs with it.
  bool stash_weights = false;
  // With stash_weights: rebuild the input with the current weights, the
  // gradient still at the stashed ones (training.rebuild_with current).
  bool rebuild_with_current = false;
  // Keep each forward's graph until its backward (mode pipeline without
  // recompute).
  bool store_activations = false;
  // Rebuild the next block down on a second thread (training.overlap_rebuild).
  bool overlap_rebuild = false;
  // Index of the stage's first block in the whole network (state names).
  int first_block = 0;
  // Images (4-D activations) and convolution weights in channels_last
  // (training.memory_format; stage_boundary.h's ChannelsLast).
  bool channels_last = false;
  // What the stage hands on (its outputs forward, its rebuilt inputs and
  // their gradients backward) rounded to bf16 (training.wire_dtype).
  bool bf16_wire = false;
  // Where the stage's parameters, optimizer state and every tensor it
  // computes live. Inputs may come from anywhere (they are moved here);
  // outputs stay here, and whoever ships them moves them to the host.
  torch::Device device = torch::kCPU;
};

struct LossOutput {
  double loss = 0;  // mean over the micro-batch
  int64_t correct = 0;
  int64_t samples = 0;
  BackwardOutput backward;
  // Forward gradients: the loss's directional derivative along each
  // tangent that came up (forward_gradient_ops.h).
  std::vector<double> directional;
};

class StageWorker {
 public:
  StageWorker(std::vector<std::shared_ptr<model::Block>> blocks,
              StageConfig config, const petra::v1::JobSpec& resolved,
              LrSchedule schedule);
  ~StageWorker();

  // True when backward rebuilds the input from the output (every block
  // reversible and inputs not stashed): nothing is kept between the two.
  bool rebuilds_input() const { return program_->rebuilds_input(); }
  bool last() const { return config_.index == config_.count - 1; }
  const torch::Device& device() const { return config_.device; }
  int index() const { return config_.index; }
  int count() const { return config_.count; }

  // NaN and Inf at the stage boundary (training.non_finite): each tensor
  // that comes in or goes out of Forward, Backward and ForwardLoss is checked
  // (one isfinite().all() reduction each). With the fail policy the checks
  // are read late, so that nothing waits for a micro-batch's kernels: each
  // call reads those of the calls before it once its own work is queued,
  // and a pass ends with SettleChecks. A failed one fails that later call
  // with FAILED_PRECONDITION naming the stage, the micro-batch it was
  // queued for and the tensor.
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
  // A mode that runs a forward and an update of its own in place of the
  // backward program (forward gradients: forward_gradient_ops.h) runs them
  // on the worker's record, checks, memory ledger and counters through
  // these. Each step gets the stage's parts.
  struct Parts {
    StageBlocks& blocks;
    GradientAccumulator& optimizer;
    GradientProbe& probe;
  };
  // `forward` computes the output of the arrived input `x` and fills the
  // record `r` with what its update needs; the worker refuses a
  // micro-batch still kept, checks the input and output for NaN and Inf
  // (training.non_finite), and keeps the record.
  using OwnForward = std::function<absl::StatusOr<model::TensorPair>(
      const model::TensorPair& x, ForwardRecord& r, const Parts& parts)>;
  absl::Status ForwardOwn(uint64_t id, const model::TensorPair& input,
                          int64_t tick, const OwnForward& forward);
  // `update` takes micro-batch `id`'s record and adds the stage's gradient
  // to the optimizer (which steps every k); the worker measures the delay
  // and staleness and counts the backward.
  using OwnUpdate = std::function<absl::StatusOr<BackwardOutput>(
      ForwardRecord& r, const Parts& parts)>;
  absl::StatusOr<BackwardOutput> UpdateOwn(uint64_t id, int64_t tick,
                                           const OwnUpdate& update);
  // Micro-batch `id` is one the gradient diagnostic compares
  // (training.grad_diagnostics_every), by id.
  bool diagnoses(uint64_t id) const { return probe_.SamplesId(id); }
  // A tensor that arrives (an input, an output to rebuild from, a
  // gradient): on the stage's device, in its layout, in full precision.
  model::TensorPair Arrive(const model::TensorPair& t) const;

  // Reads the checks still queued (the fail policy's) but the newest
  // `keep`: all of them at the end of a pass.
  absl::Status SettleChecks(size_t keep = 0);

  // What the stage loop does in this stage's mode (stage_mode_ops.h),
  // with whatever the mode keeps of its own.
  ModeOps& mode_ops() { return *mode_ops_; }

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

  // The end-to-end gradient check (end_to_end_check.h). A training pass
  // begins (the last one's samples are dropped), and the check pass after
  // it: micro-batch `i` of the check is the training pass's (i N k)-th.
  void BeginTrainingPass() { check_.BeginPass(); }
  void BeginGradientCheck() { check_.BeginCheck(); }
  absl::StatusOr<model::TensorPair> CheckForward(int64_t i,
                                                 const model::TensorPair& x);
  // Last stage: the loss at the kept weights; `backward` holds the input
  // and its true gradient.
  absl::StatusOr<LossOutput> CheckLoss(int64_t i, const model::TensorPair& x,
                                       const torch::Tensor& labels);
  absl::StatusOr<BackwardOutput> CheckBackward(
      int64_t i, const model::TensorPair& output_grad);
  EndToEndSummary end_to_end() const { return check_.summary(); }
  // The rebuild's error (training.rebuild_error_every); no samples where
  // the stage keeps its input.
  RebuildErrorSummary rebuild_error() const { return rebuild_error_.summary(); }
  // training.precision bf16: F, G, the stem and the head under autocast.
  bool bf16() const { return bf16_; }
  // Last stage: evaluation forward, mean cross-entropy and correct count
  // (no backward; `backward` stays empty).
  absl::StatusOr<LossOutput> EvaluateLoss(const model::TensorPair& x,
                                          const torch::Tensor& labels);

  MemoryStats memory() const;
  // Around a training pass (RunStagePass): the host peak inside it counts
  // to the training peak, apart from evaluations' and exports'.
  void OpenTrainingPeak() { training_peak_.Open(); }
  void CloseTrainingPeak() { training_peak_.Close(); }
  // With replicas: the group this stage averages its gradients in before
  // each optimizer step (replica_group.h); not owned, outlives the worker's
  // passes.
  void set_gradient_averager(GradientAverager* averager) {
    optimizer_.set_averager(averager);
  }
  // After a training pass, with replicas (RunStagePass calls it in both
  // runners): the replicas' weights must be identical, checked by a
  // checksum of the parameters that the group compares
  // (FAILED_PRECONDITION, counted in replica_mismatches(), when they are
  // not); then the BN running statistics, which each replica gathered on
  // its own micro-batches, become their mean. Every replica of the stage
  // calls it. Nothing to do without replicas.
  absl::Status SettleReplicas();
  int64_t replica_mismatches() const { return replica_mismatches_; }
  // The all-reduce's seconds and bytes so far (0 without replicas).
  double allreduce_seconds() const;
  int64_t allreduce_bytes() const;
  int64_t optimizer_steps() const { return optimizer_.steps(); }
  // The next step's rate (delay-scaled), the steps clipped so far and the
  // last step's gradient norm before clipping (0 when clipping is off).
  double learning_rate() const { return optimizer_.learning_rate(); }
  int64_t clipped_steps() const { return optimizer_.clipped_steps(); }
  double gradient_norm() const { return optimizer_.last_gradient_norm(); }
  int64_t forward_count() const { return forwards_; }
  int64_t backward_count() const { return backwards_; }
  // Wall seconds spent in training's forwards and backwards (the loss step
  // and a forward-gradient update count as backward), on this stage's
  // thread, device work included as far as the host waited for it.
  double forward_seconds() const { return forward_seconds_; }
  double backward_seconds() const { return backward_seconds_; }
  // Wall seconds of training passes outside the stage's computations, as
  // the executor that runs them counts them (stage_loop.cc): idle, waiting
  // for an operation's input, and handing outputs on.
  void CountIdle(double seconds) { idle_seconds_ += seconds; }
  void CountSend(double seconds) { send_seconds_ += seconds; }
  double idle_seconds() const { return idle_seconds_; }
  double send_seconds() const { return send_seconds_; }
  // Micro-batches this stage skipped for NaN or Inf (skip policy).
  int64_t skipped_count() const { return skipped_; }
  double delay_ticks_mean() const;
  double staleness_mean() const;
  // The most optimizer steps a micro-batch can see between its forward and
  // backward here, by the schedule: ceil(2 (J - 1 - j) / k); 0 in backprop.
  int64_t staleness_bound() const { return staleness_bound_; }
  // Micro-batches forwarded and not yet backwarded.
  int64_t in_flight() const { return static_cast<int64_t>(records_.size()); }
  std::vector<torch::Tensor> parameters() const { return blocks_.parameters(); }
  // The newest gradient diagnostic (training.grad_diagnostics_every), if any.
  std::optional<GradientDiagnostic> last_diagnostic() const {
    return probe_.last();
  }
  // Parameters then BN running statistics, in block order (checkpoints).
  std::vector<torch::Tensor> state_tensors() const;

  // The stage's state by name (stage_state.h): the model's tensors (the
  // export's names), and with `with_optimizer` the optimizer's too
  // (checkpoints).
  NamedTensorList NamedState(bool with_optimizer) const;
  // Restores what NamedState(true) returned and the step counter. Every
  // model tensor must be present with its shape; INVALID_ARGUMENT naming the
  // first one that is not.
  absl::Status LoadNamedState(const std::map<std::string, torch::Tensor>& state,
                              int64_t steps);

 private:
  // Guard (torch_guard.h) in the stage's precision: every public call that
  // computes runs its work through this, on whatever thread calls it.
  template <typename F>
  auto Computing(absl::string_view what, F&& f) -> decltype(f());

  // A tensor the stage hands on: in the wire's dtype.
  model::TensorPair Depart(model::TensorPair t) const;

  absl::StatusOr<ForwardRecord> TakeRecord(uint64_t id);
  // A forward's record, begun: refused when micro-batch `id` is still
  // recorded (`until`: what ends a record, for the error), its tick and
  // step set, and its input `x` checked for non-finite values.
  absl::StatusOr<ForwardRecord> BeginRecord(uint64_t id,
                                            const model::TensorPair& x,
                                            int64_t tick,
                                            absl::string_view until);
  // A skipped micro-batch's backward: x~_{j-1} without a graph or BN update,
  // zero gradients.
  BackwardOutput SkippedBackward(const ForwardRecord& r,
                                 const model::TensorPair& output);
  // Delay and staleness of the backward of `r` at `tick`, into `out`.
  void Measure(const ForwardRecord& r, int64_t tick, BackwardOutput& out);
  void FinishBackward();
  void UpdatePeak();
  // Bytes of the tensors the stage has made and not freed: its own on the
  // CPU, its device's on a GPU.
  int64_t LiveBytes() const;
  // The optimizer's state and the mode's own (stage_mode_ops.h).
  int64_t OptimizerBytes() const;
  const StageConfig config_;
  const bool bf16_;
  const int64_t staleness_bound_;
  // Optimizer steps the forward's weights are predicted ahead
  // (training.predict_weights): the stage's mean delay, 2 (J - 1 - j) / k;
  // 0 when off.
  const double predict_steps_;
  StageBlocks blocks_;
  GradientAccumulator optimizer_;
  std::unique_ptr<BackwardProgram> program_;
  // The mode as the stage loop runs it, chosen here, once.
  std::unique_ptr<ModeOps> mode_ops_;
  // The CPU tensors this stage's threads allocate (Computing runs under it).
  model::HostMemoryAccount* const host_;
  // host_'s peak inside training passes, apart.
  model::WindowedPeak training_peak_;
  NonFiniteCheck finite_;
  GradientProbe probe_;
  EndToEndCheck check_;
  RebuildErrorProbe rebuild_error_;
  MemoryLedger ledger_;
  std::map<uint64_t, ForwardRecord> records_;
  int64_t forwards_ = 0;
  double forward_seconds_ = 0;
  double backward_seconds_ = 0;
  double idle_seconds_ = 0;
  double send_seconds_ = 0;
  int64_t backwards_ = 0;
  int64_t skipped_ = 0;
  int64_t replica_mismatches_ = 0;
  int64_t delay_sum_ = 0;
  int64_t staleness_sum_ = 0;
  int64_t measured_ = 0;
};

}  // namespace petra::engine

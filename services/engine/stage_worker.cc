#include "services/engine/stage_worker.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/engine/forward_gradient_stage.h"
#include "services/engine/replica_group.h"
#include "services/engine/skip_transaction.h"
#include "services/engine/stage_boundary.h"
#include "services/engine/stage_mode_ops.h"
#include "services/engine/stage_worker_computing.h"
#include "services/engine/torch_guard.h"
#include "services/engine/weight_prediction.h"
#include "services/model/batch_norm.h"
#include "services/model/classification_loss.h"
#include "services/model/device_memory.h"
#include "services/model/precision.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {
namespace {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

// PETRA's tick order: a micro-batch's backward comes this many ticks after
// its forward on stage `c` (pipeline_schedule.h), one backward a tick.
int64_t DelayTicks(const StageConfig& c) { return 2 * (c.count - 1 - c.index); }

// The same delay in optimizer steps, 2 (J - 1 - j) / k, where `on` (the
// option that acts across it); else 0.
double DelaySteps(const StageConfig& c, const petra::v1::JobSpec& resolved,
                  bool on) {
  return on ? static_cast<double>(DelayTicks(c)) /
                  resolved.training().accumulation_steps()
            : 0.0;
}

}  // namespace

StageWorker::StageWorker(std::vector<std::shared_ptr<model::Block>> blocks,
                         StageConfig config, const petra::v1::JobSpec& resolved,
                         LrSchedule schedule)
    : config_(config),
      bf16_(resolved.training().precision() ==
            petra::v1::TrainingSpec::PRECISION_BF16),
      staleness_bound_(schedule::PlanMode(resolved.training()).delayed_gradients
                           ? (DelayTicks(config) +
                              resolved.training().accumulation_steps() - 1) /
                                 resolved.training().accumulation_steps()
                           : 0),
      predict_steps_(
          DelaySteps(config, resolved, resolved.training().predict_weights())),
      blocks_(
          PlaceBlocks(std::move(blocks), config.device, config.channels_last),
          config.index == 0),
      // Delay-scaled rates (schedule.delay_lr_power) and the delay
      // corrections where gradients are late.
      optimizer_(
          blocks_.parameters(), resolved,
          schedule.ForDelay(DelaySteps(
              config, resolved,
              schedule::PlanMode(resolved.training()).delayed_gradients)),
          DelaySteps(config, resolved,
                     schedule::PlanMode(resolved.training()).delayed_gradients),
          blocks_.weight_decay_mask()),
      program_(ChooseBackwardProgram(
          blocks_,
          {config.stash_inputs, config.stash_weights, config.overlap_rebuild,
           config.rebuild_with_current, config.store_activations})),
      mode_ops_(MakeModeOps(resolved, config, std::move(schedule))),
      host_(model::HostMemoryAccount::Create()),
      training_peak_(host_),
      finite_(config.index, resolved.training().non_finite()),
      // Sampled wherever the backward may use other weights than the
      // forward did (no weight stash).
      probe_(config.stash_weights
                 ? 0
                 : resolved.training().grad_diagnostics_every(),
             static_cast<int>(resolved.training().accumulation_steps())),
      check_(resolved.training().end_to_end_every(),
             static_cast<int>(resolved.training().accumulation_steps())),
      rebuild_error_(resolved.training().rebuild_error_every()) {
  model::ResetDeviceMemoryPeak(config_.device.str());
  // A CPU stage's measured memory (a GPU's allocator counts its own): at
  // about 0.1 us an allocation, a few per cent of the smallest ops.
  if (config_.device.is_cpu()) model::CountHostMemory();
  UpdatePeak();
}

StageWorker::~StageWorker() = default;

TensorPair StageWorker::Arrive(const TensorPair& t) const {
  return Arriving(t, config_.device, config_.channels_last);
}

TensorPair StageWorker::Depart(TensorPair t) const {
  return Departing(std::move(t), config_.bf16_wire);
}

absl::Status StageWorker::SettleChecks(size_t keep) {
  return Guard(config_.index, "non-finite check",
               [&]() -> absl::Status { return finite_.Settle(keep); });
}

absl::StatusOr<TensorPair> StageWorker::Forward(uint64_t id,
                                                const TensorPair& input,
                                                int64_t tick) {
  auto result = Computing("forward", [&]() -> absl::StatusOr<TensorPair> {
    const TensorPair x = Arrive(input);
    absl::StatusOr<ForwardRecord> begun =
        BeginRecord(id, x, tick, "backwarded");
    if (!begun.ok()) return begun.status();
    ForwardRecord& r = *begun;
    // Until the record is kept: the weight stash and the diagnostic's
    // sample take the weights the forward used.
    std::optional<MovedWeights> ahead;
    if (predict_steps_ > 0) {
      ahead.emplace(MovedWeights::Predicted(optimizer_, predict_steps_));
    }
    const int64_t live = LiveBytes();
    TensorPair y = program_->Forward(blocks_, x, r);
    // A kept graph's activations, as the allocator counted them.
    if (r.graph_output.a.defined()) {
      r.graph_bytes = std::max<int64_t>(0, LiveBytes() - live);
    }
    // A skipped forward still goes up, NaN and all: the stages above skip
    // it as well, and the ids stay in step.
    if (!r.skipped) {
      if (absl::Status s =
              finite_.Check(y, id, "the output activation", &r.skipped);
          !s.ok()) {
        return s;
      }
    }
    // With the forward's weights (a prediction's included): what differs
    // from x is arithmetic alone.
    if (!r.skipped && program_->rebuilds_input() &&
        rebuild_error_.Samples(forwards_)) {
      rebuild_error_.Measure(x, y, blocks_);
    }
    program_->Keep(x, r);
    ledger_.Keep(r.input.nbytes() + r.graph_bytes, TensorBytes(r.weights));
    // Kept apart from the memory accounting.
    probe_.MaybeSample(optimizer_.steps(), x, blocks_, r);
    ahead.reset();
    records_.emplace(id, std::move(r));
    ++forwards_;
    UpdatePeak();
    return y;
  });
  if (result.ok()) *result = Depart(*result);
  return result;
}

absl::StatusOr<ForwardRecord> StageWorker::BeginRecord(
    uint64_t id, const TensorPair& x, int64_t tick, absl::string_view until) {
  if (records_.count(id) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("micro-batch ", id, " was already forwarded by stage ",
                     config_.index, " and not yet ", until));
  }
  ForwardRecord r;
  r.tick = tick;
  r.step = optimizer_.steps();
  if (absl::Status s = finite_.Check(x, id, "the input activation", &r.skipped);
      !s.ok()) {
    return s;
  }
  return r;
}

absl::StatusOr<ForwardRecord> StageWorker::TakeRecord(uint64_t id) {
  auto it = records_.find(id);
  if (it == records_.end()) {
    return absl::NotFoundError(absl::StrCat("stage ", config_.index,
                                            " has no forward of micro-batch ",
                                            id, " waiting for its backward"));
  }
  ForwardRecord r = std::move(it->second);
  records_.erase(it);
  ledger_.Free(r.input.nbytes() + r.graph_bytes,
               TensorBytes(r.weights) + TensorBytes(r.guess));
  return r;
}

void StageWorker::Measure(const ForwardRecord& r, int64_t tick,
                          BackwardOutput& out) {
  out.delay_ticks = tick - r.tick;
  out.staleness_steps = optimizer_.steps() - r.step;
  delay_sum_ += out.delay_ticks;
  staleness_sum_ += out.staleness_steps;
  ++measured_;
}

absl::StatusOr<BackwardOutput> StageWorker::Backward(
    uint64_t id, const TensorPair& received_output,
    const TensorPair& received_grad, int64_t tick) {
  auto result = Computing("backward", [&]() -> absl::StatusOr<BackwardOutput> {
    const TensorPair output = Arrive(received_output);
    const TensorPair output_grad = Arrive(received_grad);
    absl::StatusOr<ForwardRecord> r = TakeRecord(id);
    if (!r.ok()) return r.status();
    bool skip = r->skipped;
    if (!skip && program_->rebuilds_input()) {
      if (absl::Status s = finite_.Check(
              output, id, "the activation received for the backward", &skip);
          !s.ok()) {
        return s;
      }
    }
    if (!skip) {
      if (absl::Status s =
              finite_.Check(output_grad, id, "the gradient received", &skip);
          !s.ok()) {
        return s;
      }
    }
    const bool sampled = check_.Samples(static_cast<int64_t>(id));
    if (skip) {
      BackwardOutput out = SkippedBackward(*r, output);
      Measure(*r, tick, out);
      ++skipped_;
      if (sampled) check_.KeepSample(static_cast<int64_t>(id), blocks_, {});
      FinishBackward();
      return out;
    }
    SkipTransaction update(finite_, optimizer_, &skipped_);
    std::vector<torch::Tensor> before;
    if (!r->diagnostic_weights.empty() || sampled)
      before = probe_.GradientsBefore(blocks_);
    BackwardOutput out;
    {
      // PipeMare's discrepancy correction: the backward at the weights the
      // forward is estimated to have had; the step below at the true ones.
      std::optional<MovedWeights> back;
      if (optimizer_.corrects_discrepancy()) {
        back.emplace(MovedWeights::AtTheForward(optimizer_));
      }
      out = program_->Run(*r, output, output_grad, optimizer_);
    }
    absl::StatusOr<bool> bad = update.Finish(id, &out.input_grad);
    if (!bad.ok()) return bad.status();
    if (!*bad && !r->diagnostic_weights.empty()) {
      probe_.Compare(*r, output_grad, before, optimizer_.steps(), blocks_);
    }
    if (sampled)
      check_.KeepSample(static_cast<int64_t>(id), blocks_,
                        *bad ? std::vector<torch::Tensor>{} : before);
    Measure(*r, tick, out);
    FinishBackward();
    return out;
  });
  if (result.ok()) {
    result->input = Depart(result->input);
    result->input_grad = Depart(result->input_grad);
  }
  return result;
}

absl::StatusOr<LossOutput> StageWorker::ForwardLoss(
    uint64_t id, const TensorPair& input, const torch::Tensor& received_labels,
    int64_t tick) {
  auto result = Computing("forward-loss", [&]() -> absl::StatusOr<LossOutput> {
    const TensorPair x = Arrive(input);
    const torch::Tensor labels =
        model::ToDevice(received_labels, config_.device);
    if (absl::Status s = model::CheckLabels(labels, x.a.size(0)); !s.ok()) {
      return s;
    }
    bool skip_input = false;
    if (absl::Status s =
            finite_.Check(x, id, "the input activation", &skip_input);
        !s.ok()) {
      return s;
    }
    const bool sampled = check_.Samples(static_cast<int64_t>(id));
    if (skip_input) {
      // Not even a forward: its recompute would take NaN into the BN
      // running statistics.
      if (sampled) check_.KeepSample(static_cast<int64_t>(id), blocks_, {});
      LossOutput out;
      out.loss = std::numeric_limits<double>::quiet_NaN();
      out.samples = labels.numel();  // a language model's: its tokens
      out.backward.input = x.detach();
      if (config_.index > 0) out.backward.input_grad = ZerosLike(x);
      ++forwards_;
      ++measured_;
      ++skipped_;
      FinishBackward();
      return out;
    }
    SkipTransaction update(finite_, optimizer_, &skipped_);
    std::vector<torch::Tensor> before;
    if (sampled) before = probe_.GradientsBefore(blocks_);
    // Forward and backward are one step here: the forward is the recompute,
    // so it updates the BN running statistics.
    torch::Tensor logits, loss;
    bool finite = true;
    TensorPair input_grad = blocks_.Recompute(
        x,
        [&](const TensorPair& y) {
          logits = y.a;
          loss = model::CrossEntropy(logits, labels);
          finite = std::isfinite(loss.item<double>());
          using Result =
              std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>;
          return finite ? Result{{loss}, {}} : Result{};
        },
        optimizer_);
    if (!finite && !finite_.skips()) {
      // `update` drops the gradients. The loss's read waited for this
      // micro-batch's forward: its input check is in, and names the cause
      // better when it failed.
      if (absl::Status s = finite_.Settle(); !s.ok()) return s;
      return absl::FailedPreconditionError(absl::StrCat(
          "the loss of micro-batch ", id, " is ", loss.item<double>(),
          " (training diverged; lower the learning rate, or set "
          "training.non_finite to skip such micro-batches)"));
    }
    absl::StatusOr<bool> skipped = update.Finish(id, &input_grad, !finite);
    if (!skipped.ok()) return skipped.status();
    const bool bad = *skipped;
    if (sampled) {
      check_.KeepSample(static_cast<int64_t>(id), blocks_,
                        bad ? std::vector<torch::Tensor>{} : before);
    }
    LossOutput out;
    // A micro-batch skipped for its gradient reports its loss as NaN
    // too: "skipped" means one thing on every count (this stage's, the
    // epoch's mean and skip count, the train log's nan).
    out.loss =
        bad ? std::numeric_limits<double>::quiet_NaN() : loss.item<double>();
    out.samples = labels.numel();  // a language model's: its tokens
    out.correct = model::CorrectCount(logits, labels);
    out.backward.input = x.detach();
    out.backward.input_grad = input_grad;
    (void)tick;  // the loss step's delay and staleness are 0
    ++forwards_;
    ++measured_;
    FinishBackward();
    return out;
  });
  if (result.ok()) {
    result->backward.input = Depart(result->backward.input);
    result->backward.input_grad = Depart(result->backward.input_grad);
  }
  return result;
}

absl::Status StageWorker::ForwardOwn(uint64_t id, const TensorPair& input,
                                     int64_t tick, const OwnForward& forward) {
  return Computing("forward", [&]() -> absl::Status {
    const TensorPair x = Arrive(input);
    absl::StatusOr<ForwardRecord> begun = BeginRecord(id, x, tick, "updated");
    if (!begun.ok()) return begun.status();
    ForwardRecord& r = *begun;
    absl::StatusOr<TensorPair> y = forward(x, r, {blocks_, optimizer_, probe_});
    if (!y.ok()) return y.status();
    if (absl::Status s =
            finite_.Check(*y, id, "the output activation", &r.skipped);
        !s.ok()) {
      return s;
    }
    // What TakeRecord frees.
    ledger_.Keep(r.input.nbytes() + r.graph_bytes,
                 TensorBytes(r.weights) + TensorBytes(r.guess));
    records_.emplace(id, std::move(r));
    ++forwards_;
    UpdatePeak();
    return absl::OkStatus();
  });
}

absl::StatusOr<BackwardOutput> StageWorker::UpdateOwn(uint64_t id, int64_t tick,
                                                      const OwnUpdate& update) {
  return Computing("update", [&]() -> absl::StatusOr<BackwardOutput> {
    absl::StatusOr<ForwardRecord> r = TakeRecord(id);
    if (!r.ok()) return r.status();
    absl::StatusOr<BackwardOutput> out =
        update(*r, {blocks_, optimizer_, probe_});
    if (!out.ok()) return out.status();
    Measure(*r, tick, *out);
    FinishBackward();
    return out;
  });
}

BackwardOutput StageWorker::SkippedBackward(const ForwardRecord& r,
                                            const TensorPair& output) {
  BackwardOutput out;
  out.input = program_->SkippedInput(r, output);
  if (config_.index > 0) out.input_grad = ZerosLike(out.input);
  return out;
}

void StageWorker::FinishBackward() {
  ++backwards_;
  optimizer_.FinishBackward([this] { UpdatePeak(); });
  UpdatePeak();
}

MemoryStats StageWorker::memory() const {
  MemoryStats m = ledger_.Stats(blocks_.state_bytes(), OptimizerBytes());
  const model::DeviceMemory d = model::ReadDeviceMemory(config_.device.str());
  m.device_bytes = d.allocated_bytes;
  m.device_reserved_bytes = d.reserved_bytes;
  m.device_peak_bytes = d.peak_allocated_bytes;
  m.host_tensor_bytes = host_->bytes();
  m.host_tensor_peak_bytes = training_peak_.peak();
  m.host_tensor_train_peak_bytes = training_peak_.window_peak();
  return m;
}

int64_t StageWorker::LiveBytes() const {
  return config_.device.is_cpu()
             ? host_->bytes()
             : model::ReadDeviceMemory(config_.device.str()).allocated_bytes;
}

void StageWorker::UpdatePeak() {
  ledger_.Observe(blocks_.state_bytes(), OptimizerBytes());
}

int64_t StageWorker::OptimizerBytes() const {
  return optimizer_.state_bytes() + mode_ops_->state_bytes();
}

double StageWorker::allreduce_seconds() const {
  const GradientAverager* a = optimizer_.averager();
  return a == nullptr ? 0.0 : a->seconds();
}

int64_t StageWorker::allreduce_bytes() const {
  const GradientAverager* a = optimizer_.averager();
  return a == nullptr ? 0 : a->bytes();
}

double StageWorker::delay_ticks_mean() const {
  return measured_ == 0 ? 0.0 : static_cast<double>(delay_sum_) / measured_;
}

double StageWorker::staleness_mean() const {
  return measured_ == 0 ? 0.0 : static_cast<double>(staleness_sum_) / measured_;
}

std::vector<torch::Tensor> StageWorker::state_tensors() const {
  std::vector<torch::Tensor> out = blocks_.parameters();
  for (const auto& b : blocks_.blocks()) {
    for (const torch::Tensor& t : b->buffers()) out.push_back(t);
  }
  return out;
}

NamedTensorList StageWorker::NamedState(bool with_optimizer) const {
  NamedTensorList out =
      NamedStageState(blocks_, config_.first_block, optimizer_, with_optimizer);
  // What the mode trains beside the model: checkpoints keep it, the export
  // does not.
  if (with_optimizer) mode_ops_->AppendNamedState(out);
  return out;
}

absl::Status StageWorker::LoadNamedState(
    const std::map<std::string, torch::Tensor>& state, int64_t steps) {
  return Guard(config_.index, "restore", [&]() -> absl::Status {
    if (absl::Status s = LoadNamedStageState(state, blocks_,
                                             config_.first_block, optimizer_);
        !s.ok()) {
      return s;
    }
    optimizer_.ResetCounters(steps);
    if (absl::Status s = mode_ops_->LoadNamedState(state, steps); !s.ok()) {
      return s;
    }
    UpdatePeak();
    return absl::OkStatus();
  });
}

}  // namespace petra::engine

#include "services/engine/stage_worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>

#include "services/data/batches.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker_test_support.h"
#include "services/job/job_spec_validation.h"
#include "services/model/device_memory.h"
#include "services/model/network.h"
#include "services/model/network_summary.h"
#include "services/model/partition_plan.h"
#include "services/model/precision.h"
#include "services/schedule/pipeline_schedule.h"
#include "tests/support/require_cuda.h"

namespace petra::engine {
namespace {

// schedule.delay_lr_power reaches a stage's optimizer: stage 0 of 3, whose
// gradients come 4 ticks (k = 1: 4 steps) after its forward, moves its
// weights by (1 + 4)^-1 of the step the shared rate makes (plain SGD).
TEST(StageWorker, ADelayedStageStepsAtItsDelayScaledRate) {
  auto first_step = [](double power) {
    petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
    spec.mutable_optimizer()->set_momentum(0);
    spec.mutable_optimizer()->set_nesterov(false);
    spec.mutable_optimizer()->set_weight_decay(0);
    spec.mutable_schedule()->set_warmup_epochs(0);
    spec.mutable_schedule()->set_decay(petra::v1::ScheduleSpec::DECAY_CONSTANT);
    spec.mutable_schedule()->set_delay_lr_power(power);
    auto workers = Workers(spec, {{0, 1}, {1, 2}, {2, 10}});
    StageWorker& w = *workers[0];
    // What petra_stage_learning_rate exports: the shared rate over 1 + 4.
    EXPECT_DOUBLE_EQ(w.learning_rate(),
                     spec.optimizer().learning_rate() / (power > 0 ? 5 : 1));
    std::vector<torch::Tensor> before;
    for (const torch::Tensor& p : w.parameters()) before.push_back(p.clone());
    const data::Batch batch = Batches(1, 8)[0];
    absl::StatusOr<TensorPair> y = w.Forward(0, {batch.images, {}}, 0);
    EXPECT_TRUE(y.ok()) << y.status();
    const TensorPair g{torch::ones_like(y->a),
                       y->b.defined() ? torch::ones_like(y->b) : y->b};
    EXPECT_TRUE(w.Backward(0, *y, g, 4).ok());
    EXPECT_EQ(w.optimizer_steps(), 1);
    std::vector<torch::Tensor> step;
    for (size_t i = 0; i < before.size(); ++i) {
      step.push_back(w.parameters()[i].detach() - before[i]);
    }
    return step;
  };
  const std::vector<torch::Tensor> shared = first_step(0);
  const std::vector<torch::Tensor> scaled = first_step(1);
  ASSERT_EQ(shared.size(), scaled.size());
  double moved = 0;
  for (size_t i = 0; i < shared.size(); ++i) {
    moved += shared[i].abs().sum().item<double>();
    EXPECT_TRUE(torch::allclose(scaled[i], shared[i] / 5, 1e-5, 1e-9)) << i;
  }
  EXPECT_GT(moved, 0);
}

// RevViT per block in PETRA mode: every stage but the stem's (and the
// head's, whose loss step keeps nothing between ticks) rebuilds its input
// and holds 0 activation-buffer bytes at every tick.
TEST(StageWorker, RevViTStagesHoldNoActivationsAtAnyTick) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVVIT, 1);
  std::vector<data::Batch> batches = Batches(16, 8);
  auto ranges = model::PerBlockPartition(6);
  auto workers = Workers(spec, ranges);
  for (int j = 1; j < 5; ++j) EXPECT_TRUE(workers[j]->rebuilds_input()) << j;
  int64_t observed = 0;
  RunPetraSchedule(workers, batches, [&](int j, int64_t) {
    if (j == 0) return;
    ++observed;
    ASSERT_EQ(workers[j]->memory().activation_buffer_bytes, 0) << "stage " << j;
    ASSERT_EQ(workers[j]->memory().peak_activation_buffer_bytes, 0) << j;
  });
  EXPECT_GT(observed, 0);
  EXPECT_GT(workers[0]->memory().peak_activation_buffer_bytes, 0);
}

TEST(StageWorker, BufferBytesFollowTheSchedule) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  // More micro-batches than the deepest pipeline (2(J-1) + 1 = 19), so the
  // steady state is reached.
  std::vector<data::Batch> batches = Batches(24, 8);
  auto ranges = model::PerBlockPartition(10);
  auto workers = Workers(spec, ranges);
  std::vector<model::BlockSummary> blocks =
      model::SummarizeBlocks(*model::DescribeNetwork(spec.model()));
  const int J = 10;
  RunPetraSchedule(workers, batches, [&](int j, int64_t) {
    // A rebuilding stage holds nothing, at every instant.
    if (workers[j]->rebuilds_input()) {
      ASSERT_EQ(workers[j]->memory().activation_buffer_bytes, 0)
          << "stage " << j;
    }
  });
  for (int j = 0; j < J - 1; ++j) {
    MemoryStats m = workers[j]->memory();
    EXPECT_EQ(m.activation_buffer_bytes, 0) << "drained, stage " << j;
    if (workers[j]->rebuilds_input()) {
      EXPECT_EQ(m.peak_activation_buffer_bytes, 0) << j;
      continue;
    }
    // In steady state 2(J-1-j) + 1 inputs are in flight after a forward.
    int64_t input_bytes = 8 * 4;
    std::vector<int64_t> shape =
        j == 0 ? std::vector<int64_t>{1, 28, 28} : blocks[j - 1].output_shape;
    for (int64_t d : shape) input_bytes *= d;
    if (j > 0 && blocks[j - 1].output_is_pair) input_bytes *= 2;
    EXPECT_EQ(m.peak_activation_buffer_bytes,
              (2 * (J - 1 - j) + 1) * input_bytes)
        << j;
    EXPECT_EQ(workers[j]->in_flight(), 0);
  }
}

TEST(StageWorker, StashedWeightsAreHeldUntilBackward) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  auto workers = Workers(spec, model::PerBlockPartition(10), false, true);
  RunPetraSchedule(workers, Batches(24, 8));
  for (int j = 0; j < 9; ++j) {
    MemoryStats m = workers[j]->memory();
    int64_t param_bytes = 0;
    for (auto& p : workers[j]->parameters()) param_bytes += p.numel() * 4;
    EXPECT_EQ(m.peak_weight_stash_bytes, (2 * (10 - 1 - j) + 1) * param_bytes)
        << j;
    EXPECT_EQ(m.weight_stash_bytes, 0);
  }
}

TEST(StageWorker, RunningStatisticsChangeOnlyInBackward) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  auto workers = Workers(spec, {{0, 1}, {1, 2}, {2, 10}});
  std::vector<data::Batch> batches = Batches(1, 8);
  auto running = [&](int j) {
    std::vector<torch::Tensor> out;
    for (auto& t : workers[j]->state_tensors()) out.push_back(t.clone());
    return out;
  };
  auto before0 = running(0), before1 = running(1);
  TensorPair h = *workers[0]->Forward(0, {batches[0].images, {}}, 0);
  TensorPair y = *workers[1]->Forward(0, h, 1);
  EXPECT_TRUE(Same(before0, running(0)));
  EXPECT_TRUE(Same(before1, running(1)));
  LossOutput l = *workers[2]->ForwardLoss(0, y, batches[0].labels, 2);
  BackwardOutput b1 =
      *workers[1]->Backward(0, l.backward.input, l.backward.input_grad, 3);
  EXPECT_FALSE(
      Same(before1, running(1)));  // rebuild updated them (and the step)
  EXPECT_TRUE(Same(before0, running(0)));
  ASSERT_TRUE(workers[0]->Backward(0, b1.input, b1.input_grad, 4).ok());
  EXPECT_FALSE(Same(before0, running(0)));
  // Evaluation leaves them alone.
  auto after0 = running(0);
  ASSERT_TRUE(workers[0]->Evaluate({batches[0].images, {}}).ok());
  EXPECT_TRUE(Same(after0, running(0)));
}

TEST(StageWorker, RefusesUnknownAndDuplicateMicroBatches) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  auto workers = Workers(spec, {{0, 1}, {1, 10}});
  std::vector<data::Batch> batches = Batches(1, 8);
  ASSERT_TRUE(workers[0]->Forward(7, {batches[0].images, {}}, 0).ok());
  absl::StatusOr<TensorPair> again =
      workers[0]->Forward(7, {batches[0].images, {}}, 1);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<BackwardOutput> unknown = workers[0]->Backward(8, {}, {}, 2);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()),
              ::testing::HasSubstr("micro-batch 8"));
  // A bad tensor is an error, not a crash.
  absl::StatusOr<TensorPair> bad =
      workers[0]->Forward(9, {torch::ones({2, 3}), {}}, 3);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  absl::StatusOr<LossOutput> mismatch =
      workers[1]->ForwardLoss(1, {torch::ones({8, 1, 28, 28}), {}},
                              torch::zeros({3}, torch::kInt64), 0);
  EXPECT_FALSE(mismatch.ok());
}

// With frozen weights PETRA's gradient (rebuilt or recomputed input, current
// weights) is the exact delayed one; once the weights move, the diagnostic
// sees the two drift apart (slightly).
TEST(StageWorker, GradientDiagnosticComparesWithTheExactDelayedGradient) {
  for (double lr : {0.0, 0.05}) {
    petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
    spec.mutable_optimizer()->set_learning_rate(lr);
    spec.mutable_training()->set_grad_diagnostics_every(2);
    auto workers = Workers(spec, model::PerBlockPartition(10));
    // More micro-batches than the deepest delay (18 ticks), so that stages
    // have stepped before their newest diagnosed forward.
    RunPetraSchedule(workers, Batches(40, 8));
    int diagnosed = 0;
    for (auto& w : workers) {
      if (w->last()) {  // its backward follows its forward at once
        EXPECT_FALSE(w->last_diagnostic().has_value());
        continue;
      }
      ASSERT_TRUE(w->last_diagnostic().has_value()) << w->index();
      const GradientDiagnostic d = *w->last_diagnostic();
      ++diagnosed;
      if (lr == 0.0) {
        EXPECT_NEAR(d.cosine_similarity, 1.0, 1e-4) << w->index();
        EXPECT_NEAR(d.norm_ratio, 1.0, 1e-3) << w->index();
      } else {
        EXPECT_GT(d.step, 0) << w->index();
        EXPECT_GT(d.cosine_similarity, 0.5) << w->index();
        EXPECT_LT(d.cosine_similarity, 1.0) << w->index();
        EXPECT_GT(d.norm_ratio, 0.1) << w->index();
      }
    }
    EXPECT_EQ(diagnosed, 9);
  }
}

// training.predict_weights: a stage forwards at theta - tau lr v (tau its
// delay in optimizer steps, v its momentum buffer, lr the next step's) and
// has its own weights back, bit for bit, once the forward is done.
TEST(StageWorker, PredictedWeightsAreTheForwardsAndArePutBack) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  spec.mutable_training()->set_predict_weights(true);
  const std::vector<model::BlockRange> ranges = {{0, 1}, {1, 2}, {2, 10}};
  auto workers = Workers(spec, ranges);
  std::vector<data::Batch> batches = Batches(9, 8);
  RunPetraSchedule(workers, {batches.begin(), batches.begin() + 8});
  StageWorker& w = *workers[1];  // 2 (3 - 1 - 1) / 1 = 2 steps behind
  ASSERT_GT(w.optimizer_steps(), 0);
  std::map<std::string, torch::Tensor> state;
  for (auto& [name, t] : w.NamedState(true)) state[name] = t.clone();
  std::vector<torch::Tensor> before;
  for (const torch::Tensor& p : w.parameters()) before.push_back(p.clone());
  const double lr = LrSchedule(spec, 100).At(w.optimizer_steps());
  ASSERT_GT(lr, 0);
  std::map<std::string, torch::Tensor> moved = state;
  int predicted = 0;
  for (const auto& [name, t] : state) {
    auto v = state.find("optimizer." + name + ".momentum_buffer");
    if (v == state.end()) continue;
    moved[name] = t + v->second * (-2.0 * lr);
    ++predicted;
  }
  ASSERT_EQ(predicted, static_cast<int>(before.size()));
  // The same stage without the prediction, at the weights moved by hand
  // and at the weights as they are.
  petra::v1::JobSpec plain = spec;
  plain.mutable_training()->set_predict_weights(false);
  auto at_moved = Workers(plain, ranges);
  auto at_current = Workers(plain, ranges);
  ASSERT_TRUE(at_moved[1]->LoadNamedState(moved, w.optimizer_steps()).ok());
  ASSERT_TRUE(at_current[1]->LoadNamedState(state, w.optimizer_steps()).ok());

  const TensorPair x = *workers[0]->Forward(100, {batches[8].images, {}}, 0);
  const TensorPair y = *w.Forward(100, x, 0);
  const TensorPair want = *at_moved[1]->Forward(100, x, 0);
  const TensorPair unmoved = *at_current[1]->Forward(100, x, 0);
  EXPECT_TRUE(torch::allclose(y.a, want.a, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(y.b, want.b, 1e-6, 1e-7));
  EXPECT_FALSE(torch::allclose(y.a, unmoved.a, 1e-4, 1e-5));
  EXPECT_TRUE(Same(before, w.parameters()));
}

// training.discrepancy_correction (PipeMare): a delayed stage runs its
// backward at w - D delta, where its forward's weights are estimated to have
// been, and steps from w: its rebuilt input, input gradient and step are
// those of an uncorrected stage whose weights are w - D delta, and not
// those of one at w.
TEST(StageWorker, DiscrepancyCorrectionRunsTheBackwardAtTheForwardsWeights) {
  petra::v1::JobSpec plain = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  // The step then depends on the gradient alone, not on where it is taken.
  plain.mutable_optimizer()->set_weight_decay(0);
  petra::v1::JobSpec spec = plain;
  spec.mutable_training()->set_discrepancy_correction(true);
  const std::vector<model::BlockRange> ranges = {{0, 1}, {1, 2}, {2, 10}};
  auto workers = Workers(spec, ranges);
  std::vector<data::Batch> batches = Batches(9, 8);
  RunPetraSchedule(workers, {batches.begin(), batches.begin() + 8});
  StageWorker& w = *workers[1];  // D = 2 (3 - 1 - 1) / 1 = 2 steps
  ASSERT_GT(w.optimizer_steps(), 1);
  std::map<std::string, torch::Tensor> state;
  for (auto& [name, t] : w.NamedState(true)) state[name] = t.clone();
  std::map<std::string, torch::Tensor> moved = state;
  int corrected = 0;
  for (const auto& [name, t] : state) {
    auto drift = state.find("delay." + name + ".drift");
    if (drift == state.end()) continue;
    moved[name] = t - drift->second * 2.0;
    ++corrected;
  }
  ASSERT_EQ(corrected, static_cast<int>(w.parameters().size()));
  auto at_moved = Workers(plain, ranges);
  auto at_current = Workers(plain, ranges);
  ASSERT_TRUE(at_moved[1]->LoadNamedState(moved, w.optimizer_steps()).ok());
  ASSERT_TRUE(at_current[1]->LoadNamedState(state, w.optimizer_steps()).ok());
  std::vector<torch::Tensor> before, moved_before;
  for (const torch::Tensor& p : w.parameters()) before.push_back(p.clone());
  for (const torch::Tensor& p : at_moved[1]->parameters()) {
    moved_before.push_back(p.clone());
  }

  const TensorPair x = *workers[0]->Forward(100, {batches[8].images, {}}, 0);
  const TensorPair y = *w.Forward(100, x, 0);
  ASSERT_TRUE(at_moved[1]->Forward(100, x, 0).ok());
  ASSERT_TRUE(at_current[1]->Forward(100, x, 0).ok());
  torch::manual_seed(3);
  const TensorPair g{torch::randn_like(y.a), torch::randn_like(y.b)};
  const BackwardOutput got = *w.Backward(100, y, g, 4);
  const BackwardOutput want = *at_moved[1]->Backward(100, y, g, 4);
  const BackwardOutput uncorrected = *at_current[1]->Backward(100, y, g, 4);
  EXPECT_TRUE(torch::allclose(got.input.a, want.input.a, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(got.input_grad.a, want.input_grad.a, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(got.input_grad.b, want.input_grad.b, 1e-5, 1e-6));
  EXPECT_FALSE(
      torch::allclose(got.input_grad.a, uncorrected.input_grad.a, 1e-3, 1e-4));
  for (size_t i = 0; i < before.size(); ++i) {
    const torch::Tensor step = w.parameters()[i] - before[i];
    const torch::Tensor want_step =
        at_moved[1]->parameters()[i] - moved_before[i];
    EXPECT_TRUE(torch::allclose(step, want_step, 1e-4, 1e-6)) << "param " << i;
  }
}

// training.spike_compensation: each stage's step applies at once the
// momentum steps its delay D = 2 (J - 1 - j) / k made it miss. One
// micro-batch brings every stage the same gradient with or without it (no
// stage has stepped before its gradient is taken), so each stage's first
// step is the plain one scaled by (a + b) / (1 + m): its spike over
// Nesterov's first step, and exactly 1 on the last stage, which has no delay.
TEST(StageWorker, SpikeCompensationScalesEachStagesFirstStepByItsDelay) {
  petra::v1::JobSpec plain = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  petra::v1::JobSpec spec = plain;
  spec.mutable_training()->set_spike_compensation(true);
  const std::vector<model::BlockRange> ranges = {{0, 1}, {1, 2}, {2, 10}};
  auto compensated = Workers(spec, ranges);
  auto reference = Workers(plain, ranges);
  std::vector<std::vector<torch::Tensor>> initial;
  for (auto& w : reference) {
    initial.emplace_back();
    for (const torch::Tensor& p : w->parameters()) {
      initial.back().push_back(p.clone());
    }
  }
  std::vector<data::Batch> batches = Batches(1, 8);
  RunPetraSchedule(compensated, batches);
  RunPetraSchedule(reference, batches);
  const double m = plain.optimizer().momentum();
  ASSERT_TRUE(plain.optimizer().nesterov());
  for (size_t j = 0; j < ranges.size(); ++j) {
    ASSERT_EQ(compensated[j]->optimizer_steps(), 1);
    const double d = 2.0 * (ranges.size() - 1 - j);
    const double want = (1 + m * (1 - std::pow(m, d + 1)) / (1 - m)) / (1 + m);
    double moved = 0;
    for (size_t i = 0; i < initial[j].size(); ++i) {
      const torch::Tensor plain_step =
          reference[j]->parameters()[i] - initial[j][i];
      const torch::Tensor step =
          compensated[j]->parameters()[i] - initial[j][i];
      const double norm = plain_step.norm().item<double>();
      moved += norm;
      // Float32 rounding of the weights themselves bounds the match; a
      // wrong delay would be off by 5% or more.
      EXPECT_LE((step - plain_step * want).norm().item<double>(),
                1e-3 * want * norm + 1e-6 * initial[j][i].norm().item<double>())
          << "stage " << j << ", parameter " << i;
    }
    EXPECT_GT(moved, 0) << "stage " << j;
  }
}

TEST(StageLoop, RunsEveryTrainingSchedule) {
  class Nothing : public StageInbox, public StageOutbox {
   public:
    absl::StatusOr<ForwardBatch> NextForward(int64_t) override {
      return absl::CancelledError("no input here");
    }
    absl::StatusOr<BackwardBatch> NextBackward(int64_t) override {
      return absl::CancelledError("no input here");
    }
    absl::Status SendForward(ForwardBatch) override { return {}; }
    absl::Status SendBackward(BackwardBatch) override { return {}; }
    void ReportLoss(int64_t, const LossOutput&) override {}
  } io;
  auto workers =
      Workers(Job(petra::v1::ARCHITECTURE_REVNET18, 1), {{0, 1}, {1, 10}});
  // Every training order the simulator models starts (and stops at the
  // missing input).
  for (schedule::ScheduleKind s :
       {schedule::ScheduleKind::kGpipe, schedule::ScheduleKind::kOneFOneB,
        schedule::ScheduleKind::kPetra, schedule::ScheduleKind::kBackprop}) {
    schedule::ModePlan mode;
    mode.schedule = s;
    mode.group = 2;
    EXPECT_EQ(RunStagePass(*workers[1], io, io, petra::v1::PHASE_TRAIN, 4, mode)
                  .code(),
              absl::StatusCode::kCancelled);
  }
}

}  // namespace
}  // namespace petra::engine

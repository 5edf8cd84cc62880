#include "services/engine/in_process_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

petra::v1::JobSpec Synthetic(petra::v1::TrainingMode mode, uint32_t epochs) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_variant(petra::v1::VARIANT_MNIST);
  s.mutable_model()->set_width(0.125);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_dataset()->set_synthetic_train_size(1024);
  s.mutable_dataset()->set_synthetic_test_size(512);
  s.mutable_training()->set_mode(mode);
  s.mutable_training()->set_micro_batch_size(32);
  s.mutable_training()->set_epochs(epochs);
  s.set_seed(5);
  return s;
}

std::unique_ptr<InProcessRunner> Make(const petra::v1::JobSpec& raw) {
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(raw);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, PETRA_DATA_ROOT, catalog::InputShape(spec->model().variant()));
  EXPECT_TRUE(data.ok()) << data.status();
  absl::StatusOr<std::unique_ptr<InProcessRunner>> r =
      InProcessRunner::Create(*spec, std::move(*data), {});
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(*r);
}

// Across epochs that neither evaluate nor checkpoint, the pipeline stays
// full: only the first micro-batches of the whole pass are less stale, not
// those of every epoch. With `drain` each epoch fills and drains its own.
TEST(InProcessRunner, ThePipelineStaysFullAcrossEpochsUntilItMustDrain) {
  for (bool drain : {true, false}) {
    petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 3);
    s.mutable_evaluation()->set_every_epochs(drain ? 1 : 3);
    s.mutable_checkpoint()->set_every_epochs(drain ? 1 : 0);
    auto runner = Make(s);
    absl::StatusOr<std::vector<EpochReport>> r = runner->Run();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ(r->back().steps, 3u * 32);
    const int J = runner->stage_count();
    const int64_t n = 1024 / 32;  // micro-batches an epoch
    for (const petra::v1::StageStats& st : r->back().stages) {
      const int d = 2 * (J - 1 - static_cast<int>(st.stage_index()));
      // m-th micro-batch of a pass: min(m, d) steps stale (k = 1).
      double expected = 0;
      for (int64_t m = 0; m < (drain ? n : 3 * n); ++m) {
        expected += std::min<int64_t>(m, d);
      }
      expected /= drain ? n : 3 * n;
      EXPECT_NEAR(st.staleness_mean(), expected, 1e-12)
          << "stage " << st.stage_index() << (drain ? ", drained" : "");
    }
    // Evaluated where due, and at the end.
    EXPECT_EQ((*r)[0].evaluated, drain);
    EXPECT_EQ((*r)[1].evaluated, drain);
    EXPECT_TRUE((*r)[2].evaluated);
  }
}

// The end-to-end check: with frozen weights every stage applies the true
// gradient (cosine 1, norm ratio 1); so does backprop whatever the rate (no
// update between a micro-batch's forward and backward); PETRA's early
// stages, once the weights move, apply something else.
TEST(InProcessRunner, EndToEndCheckComparesWithTheTrueGradient) {
  struct Case {
    petra::v1::TrainingMode mode;
    double lr;
    bool exact;
  } cases[] = {{petra::v1::TRAINING_MODE_PETRA, 0.0, true},
               {petra::v1::TRAINING_MODE_BACKPROP, 0.05, true},
               {petra::v1::TRAINING_MODE_PETRA, 0.05, false}};
  for (const Case& c : cases) {
    petra::v1::JobSpec s = Synthetic(c.mode, 1);
    s.mutable_optimizer()->set_learning_rate(c.lr);
    s.mutable_training()->set_end_to_end_every(4);
    auto runner = Make(s);
    absl::StatusOr<std::vector<EpochReport>> r = runner->Run();
    ASSERT_TRUE(r.ok()) << r.status();
    const int64_t n = 1024 / 32;
    bool any_inexact = false;
    for (const petra::v1::StageStats& st : r->back().stages) {
      const std::string where = absl::StrCat("stage ", st.stage_index(),
                                             ", mode ", c.mode, ", lr ", c.lr);
      EXPECT_EQ(st.end_to_end_samples(), n / 4) << where;
      if (c.exact) {
        EXPECT_NEAR(st.end_to_end_cosine_similarity(), 1.0, 1e-4) << where;
        EXPECT_NEAR(st.end_to_end_norm_ratio(), 1.0, 1e-3) << where;
      } else {
        EXPECT_GT(st.end_to_end_cosine_similarity(), 0.0) << where;
        EXPECT_LE(st.end_to_end_cosine_similarity(), 1.0 + 1e-6) << where;
        any_inexact |= st.end_to_end_cosine_similarity() < 0.999;
      }
    }
    if (!c.exact) {
      EXPECT_TRUE(any_inexact);
    }
  }
}

// One sample a pass: the pass's last micro-batch, when every stage has moved
// since its forward, not the first, which the empty pipeline gives exact
// gradients on every stage and would read cosine 1.
TEST(InProcessRunner, EndToEndCheckSamplesThePipelineFull) {
  petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 1);
  s.mutable_optimizer()->set_learning_rate(0.05);
  s.mutable_training()->set_end_to_end_every(1024 / 32);
  auto runner = Make(s);
  absl::StatusOr<std::vector<EpochReport>> r = runner->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const petra::v1::StageStats& first = r->back().stages[0];
  EXPECT_EQ(first.end_to_end_samples(), 1);
  EXPECT_LT(first.end_to_end_cosine_similarity(), 0.999);
}

TEST(InProcessRunner, DelayIsTwiceTheDistanceToTheLastStage) {
  petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 1);
  auto runner = Make(s);
  absl::StatusOr<EpochReport> r = runner->RunEpoch(1);
  ASSERT_TRUE(r.ok()) << r.status();
  const int J = runner->stage_count();
  ASSERT_EQ(J, 10);
  const int64_t n = 1024 / 32;
  for (const petra::v1::StageStats& st : r->stages) {
    const int d = 2 * (J - 1 - static_cast<int>(st.stage_index()));
    EXPECT_DOUBLE_EQ(st.delay_ticks_mean(), d) << "stage " << st.stage_index();
    EXPECT_EQ(runner->worker(st.stage_index()).staleness_bound(), d);
    // k = 1: one step per tick, so the m-th micro-batch is min(m, d) steps
    // stale (the pipeline fills first).
    double expected = 0;
    for (int64_t m = 0; m < n; ++m) expected += std::min<int64_t>(m, d);
    EXPECT_NEAR(st.staleness_mean(), expected / n, 1e-12)
        << "stage " << st.stage_index();
    EXPECT_EQ(st.forward_count(), n);
    EXPECT_EQ(st.backward_count(), n);
    EXPECT_EQ(st.optimizer_steps(), n);
    // The stage timers: every stage computed something each way (the
    // last one's loss steps count as backward, and it forwards nothing
    // else).
    if (static_cast<int>(st.stage_index()) < J - 1) {
      EXPECT_GT(st.forward_seconds(), 0) << "stage " << st.stage_index();
    }
    EXPECT_GT(st.backward_seconds(), 0) << "stage " << st.stage_index();
  }
}

TEST(InProcessRunner, AccumulationDividesStaleness) {
  petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 1);
  s.mutable_training()->set_accumulation_steps(4);
  auto runner = Make(s);
  absl::StatusOr<EpochReport> r = runner->RunEpoch(1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stages[0].optimizer_steps(), 1024 / 32 / 4);
  EXPECT_LE(r->stages[0].staleness_mean(), 18.0 / 4 + 1);
  EXPECT_GT(r->stages[0].staleness_mean(), 0);
}

TEST(InProcessRunner, BackpropHasNoStaleness) {
  auto runner = Make(Synthetic(petra::v1::TRAINING_MODE_BACKPROP, 1));
  absl::StatusOr<EpochReport> r = runner->RunEpoch(1);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const petra::v1::StageStats& st : r->stages)
    EXPECT_EQ(st.staleness_mean(), 0) << st.stage_index();
}

// The paper's Table 3 ordering: inputs+weights > inputs > weights > PETRA.
TEST(InProcessRunner, BufferConfigurationsOrderTheirMemoryAsTable3) {
  auto total_peak = [](bool inputs, bool weights) {
    petra::v1::JobSpec s =
        Synthetic(inputs || weights ? petra::v1::TRAINING_MODE_DELAYED
                                    : petra::v1::TRAINING_MODE_PETRA,
                  1);
    s.mutable_model()->set_variant(petra::v1::VARIANT_CIFAR);
    s.mutable_model()->set_width(0.25);
    s.mutable_dataset()->set_synthetic_train_size(32 * 24);
    s.mutable_training()->set_stash_inputs(inputs);
    s.mutable_training()->set_stash_weights(weights);
    auto runner = Make(s);
    absl::StatusOr<EpochReport> r = runner->RunEpoch(1);
    EXPECT_TRUE(r.ok()) << r.status();
    int64_t total = 0;
    for (const petra::v1::StageStats& st : r->stages) {
      total += static_cast<int64_t>(st.memory().peak_bytes());
    }
    return total;
  };
  const int64_t both = total_peak(true, true);
  const int64_t inputs = total_peak(true, false);
  const int64_t weights = total_peak(false, true);
  const int64_t petra = total_peak(false, false);
  EXPECT_GT(both, inputs);
  EXPECT_GT(inputs, weights);
  EXPECT_GT(weights, petra);
}

TEST(InProcessRunner, PetraLearnsTheSyntheticSet) {
  auto runner = Make(Synthetic(petra::v1::TRAINING_MODE_PETRA, 2));
  absl::StatusOr<std::vector<EpochReport>> r = runner->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->back().test_accuracy, 0.9);
}

TEST(InProcessRunner, BackpropLearnsTheSyntheticSet) {
  auto runner = Make(Synthetic(petra::v1::TRAINING_MODE_BACKPROP, 2));
  absl::StatusOr<std::vector<EpochReport>> r = runner->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->back().test_accuracy, 0.9);
}

// A failing stage stops every stage (none hangs on its queues) and the
// error names the stage.
TEST(InProcessRunner, DivergenceFailsTheRunCleanly) {
  petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 1);
  s.mutable_optimizer()->set_learning_rate(1e12);
  auto runner = Make(s);
  absl::StatusOr<EpochReport> r = runner->RunEpoch(1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
      << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("stage 9: the loss"));
}

TEST(InProcessRunner, FullTrainPassReportsTheFinalWeightsAccuracy) {
  petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 1);
  s.mutable_evaluation()->set_full_train_pass(true);
  auto runner = Make(s);
  absl::StatusOr<EpochReport> r = runner->RunEpoch(1);
  ASSERT_TRUE(r.ok()) << r.status();
  petra::v1::JobSpec resolved = *job::ResolveJobSpec(s);
  auto data = data::LoadForJob(resolved, PETRA_DATA_ROOT, {1, 28, 28});
  ASSERT_TRUE(data.ok());
  absl::StatusOr<std::pair<double, double>> train =
      runner->Evaluate(data->train);
  ASSERT_TRUE(train.ok());
  EXPECT_DOUBLE_EQ(r->train_accuracy, train->second);
}

TEST(InProcessRunner, SameSeedSameLosses) {
  std::vector<double> a, b;
  for (std::vector<double>* out : {&a, &b}) {
    petra::v1::JobSpec s = Synthetic(petra::v1::TRAINING_MODE_PETRA, 1);
    s.mutable_dataset()->set_synthetic_train_size(320);
    absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(s);
    ASSERT_TRUE(spec.ok());
    RunnerOptions o;
    o.on_step = [out](const StepReport& r) { out->push_back(r.loss); };
    auto data = data::LoadForJob(*spec, PETRA_DATA_ROOT, {1, 28, 28});
    ASSERT_TRUE(data.ok());
    auto runner = InProcessRunner::Create(*spec, std::move(*data), o);
    ASSERT_TRUE(runner.ok());
    ASSERT_TRUE((*runner)->RunEpoch(1).ok());
  }
  ASSERT_EQ(a.size(), 10u);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace petra::engine

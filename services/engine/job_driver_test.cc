// The epoch policy against a scripted executor: no stages, no threads.
#include "services/engine/job_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "services/data/dataset.h"
#include "services/engine/job_plan.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

// Every micro-batch of 8 samples; micro-batch 1 of each training pass has a
// NaN loss, the others loss = epoch and all their samples right.
class ScriptedExecutor : public PassExecutor {
 public:
  absl::StatusOr<TrainingCursor> Restore() override { return start; }
  absl::StatusOr<PassResult> RunPass(petra::v1::Phase phase,
                                     const PassBatches& batches) override {
    const int64_t n = batches.size();
    const uint32_t epoch = batches.parts().front().epoch;
    Pass pass{phase, epoch,
              n,     batches.parts().front().batches->size(),
              {},    n > 0 ? batches.Locate(0).second : 0};
    for (const PassBatches::Part& p : batches.parts()) {
      pass.epochs.push_back(p.epoch);
    }
    passes.push_back(pass);
    PassResult r;
    for (int64_t m = 0; m < n; ++m) {
      const bool nan =
          (phase == petra::v1::PHASE_TRAIN && m == 1) ||
          (phase == petra::v1::PHASE_EVAL && epoch >= nan_eval_from);
      r.Record(m, nan ? std::numeric_limits<double>::quiet_NaN() : epoch,
               phase == petra::v1::PHASE_TRAIN ? 8 : 4, 8,
               phase == petra::v1::PHASE_TRAIN);
    }
    r.seconds = 2;
    return r;
  }
  absl::Status Checkpoint(const TrainingCursor& c) override {
    checkpoints.push_back(c);
    return absl::OkStatus();
  }
  std::vector<petra::v1::StageStats> StageStats() override { return {}; }

  struct Pass {
    petra::v1::Phase phase;
    uint32_t epoch;  // the first
    int64_t n, available;
    std::vector<uint32_t> epochs;  // every epoch the pass trains
    int64_t first_index;           // its first micro-batch's in its epoch
  };
  TrainingCursor start;
  uint32_t nan_eval_from = 1000;  // evaluations of this epoch on: all NaN
  std::vector<Pass> passes;
  std::vector<TrainingCursor> checkpoints;
};

class JobDriverTest : public ::testing::Test {
 protected:
  // 80 training examples (10 micro-batches of 8), 24 test examples.
  void Make(petra::v1::JobSpec raw) {
    raw.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
    raw.mutable_model()->set_width(0.125);
    raw.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
    raw.mutable_dataset()->set_synthetic_train_size(80);
    raw.mutable_dataset()->set_synthetic_test_size(24);
    raw.mutable_training()->set_micro_batch_size(8);
    absl::StatusOr<petra::v1::JobSpec> s = job::ResolveJobSpec(raw);
    ASSERT_TRUE(s.ok()) << s.status();
    spec_ = *s;
    absl::StatusOr<data::Splits> d = data::LoadForJob(
        spec_, "", catalog::InputShape(spec_.model().variant()));
    ASSERT_TRUE(d.ok()) << d.status();
    data_ = std::move(*d);
  }
  petra::v1::JobSpec spec_;
  data::Splits data_;
  ScriptedExecutor exec_;
};

TEST_F(JobDriverTest, MaxStepsEndsPartWayAndThatEpochIsEvaluatedAndSaved) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(5);
  raw.mutable_training()->set_accumulation_steps(2);  // 5 steps an epoch
  raw.mutable_training()->set_max_steps(7);
  raw.mutable_evaluation()->set_every_epochs(4);
  raw.mutable_checkpoint()->set_every_epochs(3);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  JobDriver driver(spec_, data_, 5, exec_, nullptr);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  // Epoch 2 trains only the 2 steps left: 4 micro-batches, whole steps; in
  // the same pass as epoch 1 (nothing to evaluate or save between them).
  ASSERT_EQ(exec_.passes.size(), 2u);
  EXPECT_EQ(exec_.passes[0].n, 14);
  EXPECT_THAT(exec_.passes[0].epochs, ::testing::ElementsAre(1, 2));
  EXPECT_EQ(exec_.passes[1].phase, petra::v1::PHASE_EVAL);
  EXPECT_EQ(exec_.passes[1].n, 3);  // 24 test examples, the last batch kept
  EXPECT_FALSE((*r)[0].evaluated);
  EXPECT_TRUE((*r)[1].evaluated);
  EXPECT_EQ((*r)[1].steps, 7u);
  // Checkpointed at the end only (every 3 epochs never came).
  ASSERT_EQ(exec_.checkpoints.size(), 1u);
  EXPECT_EQ(exec_.checkpoints[0].next_epoch, 3u);
  EXPECT_EQ(exec_.checkpoints[0].steps, 7u);
  EXPECT_EQ(exec_.checkpoints[0].samples_seen, 14u * 8);
  EXPECT_TRUE(driver.done());
}

TEST_F(JobDriverTest, NonFiniteLossesStayOutOfTheMeansPerSample) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(1);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  JobDriver driver(spec_, data_, 10, exec_, nullptr);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const EpochReport& e = (*r)[0];
  EXPECT_EQ(e.train_loss, 1.0);  // the NaN of micro-batch 1 is left out
  EXPECT_EQ(e.train_accuracy, 1.0);
  EXPECT_EQ(e.skipped_micro_batches, 1);
  EXPECT_EQ(e.samples_per_second, 9 * 8 / 2.0);
  EXPECT_EQ(e.test_accuracy, 0.5);
  // Every sample fed counts towards the data cursor, skipped or not.
  EXPECT_EQ(driver.cursor().samples_seen, 80u);
}

// full_train_pass: the evaluated epochs report the whole training split's
// accuracy through an evaluation pass over it.
TEST_F(JobDriverTest, AFullTrainPassReplacesTheRunningAccuracy) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(2);
  raw.mutable_evaluation()->set_every_epochs(2);
  raw.mutable_evaluation()->set_full_train_pass(true);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  JobDriver driver(spec_, data_, 10, exec_, nullptr);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].train_accuracy, 1.0);  // running, not evaluated
  EXPECT_EQ((*r)[1].train_accuracy, 0.5);  // the evaluation pass's
  ASSERT_EQ(exec_.passes.size(), 4u);
  EXPECT_EQ(exec_.passes[3].phase, petra::v1::PHASE_EVAL);
  EXPECT_EQ(exec_.passes[3].n, 10);  // the training split
}

// An evaluation with no finite loss gives no figures: the last ones stand,
// on every later epoch too.
TEST_F(JobDriverTest, AnEvaluationWithNoFiniteLossKeepsTheLastFigures) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(3);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  exec_.nan_eval_from = 2;
  JobDriver driver(spec_, data_, 10, exec_, nullptr);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_TRUE((*r)[0].evaluated);
  EXPECT_EQ((*r)[0].test_loss, 1.0);
  EXPECT_EQ((*r)[0].test_accuracy, 0.5);
  for (int e : {1, 2}) {
    EXPECT_FALSE((*r)[e].evaluated);
    EXPECT_EQ((*r)[e].test_loss, 1.0);
    EXPECT_EQ((*r)[e].test_accuracy, 0.5);
  }
}

// The pipeline stays full between the epochs that evaluate or checkpoint:
// one pass for epochs 1-3, one for 4-5, each epoch reported on its own.
TEST_F(JobDriverTest, OnePassSpansTheEpochsBetweenDrains) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(5);
  raw.mutable_evaluation()->set_every_epochs(3);
  raw.mutable_checkpoint()->set_every_epochs(0);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  JobDriver driver(spec_, data_, 10, exec_, nullptr);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(exec_.passes.size(), 4u);
  EXPECT_THAT(exec_.passes[0].epochs, ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(exec_.passes[0].n, 30);
  EXPECT_EQ(exec_.passes[1].phase, petra::v1::PHASE_EVAL);
  EXPECT_THAT(exec_.passes[2].epochs, ::testing::ElementsAre(4, 5));
  EXPECT_EQ(exec_.passes[3].phase, petra::v1::PHASE_EVAL);
  ASSERT_EQ(r->size(), 5u);
  for (int e = 0; e < 5; ++e) {
    EXPECT_EQ((*r)[e].epoch, e + 1u);
    EXPECT_EQ((*r)[e].steps, 10u * (e + 1));
    EXPECT_EQ((*r)[e].evaluated, e == 2 || e == 4) << e;
  }
  // The pass's one NaN (its micro-batch 1) is epoch 1's; each epoch is
  // tallied apart.
  EXPECT_EQ((*r)[0].skipped_micro_batches, 1);
  EXPECT_EQ((*r)[1].skipped_micro_batches, 0);
  EXPECT_EQ((*r)[2].train_loss, 1.0);
  // The whole pass took the executor's 2 s: the last epoch's drain included.
  double seconds = 0;
  for (int e = 0; e < 3; ++e) seconds += (*r)[e].train_seconds;
  EXPECT_NEAR(seconds, 2.0, 1e-9);
  ASSERT_EQ(exec_.checkpoints.size(), 1u);  // at the end only
  EXPECT_EQ(exec_.checkpoints[0].next_epoch, 6u);
  EXPECT_EQ(driver.cursor().samples_seen, 5u * 80);
}

// A restored cursor: training goes on from its epoch and counters.
TEST_F(JobDriverTest, ResumesFromTheRestoredCursor) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(3);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  exec_.start = {3, 20, 160};
  JobDriver driver(spec_, data_, 10, exec_, nullptr);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].epoch, 3u);
  EXPECT_EQ((*r)[0].steps, 30u);
  EXPECT_EQ(exec_.passes[0].epoch, 3u);
  // Nothing left: no pass at all.
  exec_.start = {4, 30, 240};
  exec_.passes.clear();
  r = driver.Run();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  EXPECT_TRUE(exec_.passes.empty());
}

// Hears what the driver tells an observer.
struct RecordingObserver : JobObserver {
  absl::Status OnTrainPass(uint32_t epoch, uint64_t steps_before,
                           const PassResult& train) override {
    trained.push_back({epoch, steps_before, train.losses()});
    return absl::OkStatus();
  }
  void OnEpoch(const EpochReport& report) override {
    reports.push_back(report);
  }
  struct Trained {
    uint32_t epoch;
    uint64_t steps_before;
    std::vector<std::pair<int64_t, double>> losses;
  };
  std::vector<Trained> trained;
  std::vector<EpochReport> reports;
};

// evaluation.every_steps: the pass stops at steps 2, 4, 6, 8 inside the
// epochs, evaluates, and the epoch goes on where it stopped; each epoch is
// still reported whole, and its loss log is the whole epoch's.
TEST_F(JobDriverTest, EvaluationsInsideEpochsStopThePassAndResumeTheEpoch) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(2);
  raw.mutable_training()->set_accumulation_steps(2);  // 5 steps an epoch
  raw.mutable_evaluation()->set_every_steps(2);
  raw.mutable_checkpoint()->set_every_epochs(0);
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  RecordingObserver seen;
  JobDriver driver(spec_, data_, 5, exec_, &seen);
  absl::StatusOr<std::vector<EpochReport>> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // Training passes (epoch, first micro-batch, count), each then evaluated:
  // epoch 2's end is step 10, an evaluation step and its end at once.
  const std::vector<std::tuple<uint32_t, int64_t, int64_t>> want = {
      {1, 0, 4}, {1, 4, 4}, {1, 8, 2}, {2, 0, 2}, {2, 2, 4}, {2, 6, 4}};
  ASSERT_EQ(exec_.passes.size(), 2 * want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& p = exec_.passes[2 * i];
    EXPECT_EQ(p.phase, petra::v1::PHASE_TRAIN) << i;
    EXPECT_EQ(std::make_tuple(p.epoch, p.first_index, p.n), want[i]) << i;
    EXPECT_EQ(exec_.passes[2 * i + 1].phase, petra::v1::PHASE_EVAL) << i;
  }
  ASSERT_EQ(seen.reports.size(), 6u);
  const std::vector<uint64_t> steps = {2, 4, 5, 6, 8, 10};
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(seen.reports[i].steps, steps[i]) << i;
    EXPECT_EQ(seen.reports[i].mid_epoch, i != 2 && i != 5) << i;
    EXPECT_TRUE(seen.reports[i].evaluated) << i;
  }
  // The epoch so far: 4 micro-batches, one of them NaN, 2 s.
  EXPECT_EQ(seen.reports[0].samples_per_second, 3 * 8 / 2.0);
  // Run returns the epochs' ends, each over the whole epoch: three passes
  // of 2 s, each with its NaN micro-batch.
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].epoch, 1u);
  EXPECT_EQ((*r)[0].steps, 5u);
  EXPECT_EQ((*r)[0].skipped_micro_batches, 3);
  EXPECT_EQ((*r)[0].train_seconds, 6.0);
  EXPECT_EQ((*r)[0].samples_per_second, 7 * 8 / 6.0);
  EXPECT_EQ((*r)[1].steps, 10u);
  // The loss log: once an epoch, every micro-batch under its index in the
  // epoch, from the epoch's first step.
  ASSERT_EQ(seen.trained.size(), 2u);
  EXPECT_EQ(seen.trained[1].epoch, 2u);
  EXPECT_EQ(seen.trained[1].steps_before, 5u);
  std::vector<int64_t> ids;
  for (const auto& [id, loss] : seen.trained[1].losses) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  EXPECT_THAT(ids, ::testing::ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  EXPECT_EQ(driver.cursor().samples_seen, 2u * 80);
  ASSERT_EQ(exec_.checkpoints.size(), 1u);
  EXPECT_EQ(exec_.checkpoints[0].steps, 10u);
}

// RunEpoch goes through the evaluations inside the epoch to its end.
TEST_F(JobDriverTest, RunEpochEndsAtTheEpochsEndPastItsEvaluations) {
  petra::v1::JobSpec raw;
  raw.mutable_training()->set_epochs(2);
  raw.mutable_evaluation()->set_every_steps(3);  // 10 steps an epoch
  ASSERT_NO_FATAL_FAILURE(Make(raw));
  JobDriver driver(spec_, data_, 10, exec_, nullptr);
  absl::StatusOr<EpochReport> e = driver.RunEpoch();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->mid_epoch);
  EXPECT_EQ(e->epoch, 1u);
  EXPECT_EQ(e->steps, 10u);
  EXPECT_EQ(driver.cursor().next_epoch, 2u);
}

// The number of evaluations inside epochs is bounded, with the value that
// fits in the message.
TEST(StepsPerEpochTest, RefusesMoreEvaluationsInsideEpochsThanItKeeps) {
  petra::v1::JobSpec spec;
  spec.mutable_training()->set_micro_batch_size(1);
  spec.mutable_training()->set_accumulation_steps(1);
  spec.mutable_training()->set_epochs(3);
  spec.mutable_evaluation()->set_every_steps(1);
  EXPECT_TRUE(StepsPerEpoch(spec, 100).ok());
  absl::StatusOr<int64_t> r = StepsPerEpoch(spec, 10000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("raise it to at least 3"));
  spec.mutable_evaluation()->set_every_steps(3);
  EXPECT_TRUE(StepsPerEpoch(spec, 10000).ok());
}

}  // namespace
}  // namespace petra::engine

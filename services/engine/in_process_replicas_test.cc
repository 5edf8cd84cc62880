// Replicas in the in-process runner: R copies of the pipeline, each fed
// every R-th micro-batch, averaging their gradients with c10d's Gloo before
// each step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <utility>

#include "services/engine/in_process_runner.h"
#include "services/engine/pass_batches.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

using ::testing::HasSubstr;

petra::v1::JobSpec Job(petra::v1::TrainingMode mode, uint32_t replicas,
                       uint32_t k) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_variant(petra::v1::VARIANT_MNIST);
  s.mutable_model()->set_width(0.125);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_dataset()->set_synthetic_train_size(512);
  s.mutable_dataset()->set_synthetic_test_size(128);
  s.mutable_partition()->set_stage_count(2);
  s.mutable_training()->set_mode(mode);
  s.mutable_training()->set_micro_batch_size(16);
  s.mutable_training()->set_accumulation_steps(k);
  s.mutable_training()->set_epochs(1);
  s.set_replicas(replicas);
  s.set_seed(3);
  return s;
}

struct Run {
  std::unique_ptr<InProcessRunner> runner;
  std::map<int64_t, double> losses;  // by micro-batch of the epoch
  std::mutex mu;
};

std::unique_ptr<Run> Train(const petra::v1::JobSpec& raw) {
  auto run = std::make_unique<Run>();
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(raw);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, PETRA_DATA_ROOT, catalog::InputShape(spec->model().variant()));
  EXPECT_TRUE(data.ok()) << data.status();
  RunnerOptions o;
  o.threads_per_stage = 1;
  o.on_step = [r = run.get()](const StepReport& s) {
    std::lock_guard<std::mutex> lock(r->mu);
    r->losses[s.micro_batch] = s.loss;
  };
  absl::StatusOr<std::unique_ptr<InProcessRunner>> runner =
      InProcessRunner::Create(*spec, std::move(*data), o);
  EXPECT_TRUE(runner.ok()) << runner.status();
  run->runner = std::move(*runner);
  absl::StatusOr<std::vector<EpochReport>> reports = run->runner->Run();
  EXPECT_TRUE(reports.ok()) << reports.status();
  return run;
}

// In backprop every micro-batch of a step sees the same weights, so two
// replicas of k = 1 average what one pipeline of k = 2 accumulates: the
// same losses, micro-batch by micro-batch, and the same weights (up to the
// order of the float sums). Both have a batch of 32 a step, and so the
// same default rate.
TEST(InProcessReplicas, TwoReplicasOfOneStepEqualOnePipelineOfTwo) {
  auto two = Train(Job(petra::v1::TRAINING_MODE_BACKPROP, 2, 1));
  auto one = Train(Job(petra::v1::TRAINING_MODE_BACKPROP, 1, 2));
  ASSERT_EQ(two->runner->replicas(), 2);
  ASSERT_EQ(two->losses.size(), 32u);
  ASSERT_EQ(one->losses.size(), 32u);
  for (const auto& [m, loss] : one->losses) {
    EXPECT_NEAR(two->losses.at(m), loss, 1e-4 * std::abs(loss)) << m;
  }
  for (int j = 0; j < 2; ++j) {
    const auto a = one->runner->worker(j).parameters();
    const auto b = two->runner->worker(1, j).parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-4, 1e-5))
          << "stage " << j << " parameter " << i;
    }
  }
}

// Under PETRA the replicas keep identical weights step after step (each
// stage checks it after every pass and would fail the run), and their BN
// running statistics are averaged for the evaluation.
TEST(InProcessReplicas, PetraReplicasKeepIdenticalWeights) {
  auto run = Train(Job(petra::v1::TRAINING_MODE_PETRA, 2, 1));
  ASSERT_EQ(run->losses.size(), 32u);
  for (int j = 0; j < 2; ++j) {
    const auto a = run->runner->worker(0, j).state_tensors();
    const auto b = run->runner->worker(1, j).state_tensors();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "stage " << j << " tensor " << i;
    }
    EXPECT_EQ(run->runner->worker(1, j).optimizer_steps(), 16);
    // One bucket a step, the stage's parameters in fp32; then, once, the
    // BN statistics (every state tensor past the parameters but BN's
    // int64 step counters).
    int64_t params = 0, stats = 0;
    const auto all = run->runner->worker(0, j).state_tensors();
    const size_t n = run->runner->worker(0, j).parameters().size();
    for (size_t i = 0; i < all.size(); ++i) {
      if (i < n) {
        params += all[i].numel();
      } else if (all[i].is_floating_point()) {
        stats += all[i].numel();
      }
    }
    EXPECT_GT(stats, 0);
    EXPECT_EQ(run->runner->worker(0, j).allreduce_bytes(),
              16 * 4 * params + 4 * stats);
    EXPECT_GT(run->runner->worker(1, j).allreduce_seconds(), 0);
  }
}

// The check after each pass is real: a replica whose weights were changed
// behind the group's back fails the next pass, on every replica, and the
// stage counts it.
TEST(InProcessReplicas, ReplicasThatFellOutOfStepFailThePass) {
  petra::v1::JobSpec raw = Job(petra::v1::TRAINING_MODE_PETRA, 2, 1);
  raw.mutable_training()->set_epochs(2);
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(raw);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, PETRA_DATA_ROOT, catalog::InputShape(spec->model().variant()));
  ASSERT_TRUE(data.ok()) << data.status();
  RunnerOptions o;
  o.threads_per_stage = 1;
  absl::StatusOr<std::unique_ptr<InProcessRunner>> runner =
      InProcessRunner::Create(*spec, std::move(*data), o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  InProcessRunner& r = **runner;
  ASSERT_TRUE(r.RunEpoch(1).ok());
  EXPECT_EQ(r.worker(0, 1).replica_mismatches(), 0);
  {
    torch::NoGradGuard no_grad;
    r.worker(1, 1).parameters().front().add_(1e-3);
  }
  absl::StatusOr<EpochReport> second = r.RunEpoch(2);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("fell out of step"));
  EXPECT_EQ(r.worker(0, 1).replica_mismatches(), 1);
  EXPECT_EQ(r.worker(1, 1).replica_mismatches(), 1);
  EXPECT_EQ(r.worker(0, 0).replica_mismatches(), 0);
}

TEST(InProcessReplicas, AnEpochTrainsWholeStepsOfEveryReplica) {
  // 512 / 16 = 32 micro-batches; k 3 x 2 replicas: 30 of them, 5 steps.
  auto run = Train(Job(petra::v1::TRAINING_MODE_PETRA, 2, 3));
  EXPECT_EQ(run->losses.size(), 30u);
  EXPECT_EQ(run->runner->worker(0, 0).optimizer_steps(), 5);
  EXPECT_EQ(run->runner->worker(1, 1).optimizer_steps(), 5);
}

TEST(InProcessReplicas, ReplicasAreValidated) {
  for (uint32_t bad : {0u, 1025u}) {
    petra::v1::JobSpec s = Job(petra::v1::TRAINING_MODE_PETRA, bad, 1);
    absl::Status st = job::ValidateJobSpec(s);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("replicas")) << bad;
  }
  petra::v1::JobSpec s = Job(petra::v1::TRAINING_MODE_PETRA, 1, 1);
  s.clear_replicas();
  absl::StatusOr<petra::v1::JobSpec> r = job::ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->replicas(), 1u);
}

TEST(PassBatches, DealingGivesEveryReplicaAsMany) {
  data::Splits d = data::MakeSynthetic({1, 28, 28}, 10, 7 * 4, 4, 1);
  data::BatchOptions o;
  o.batch_size = 4;
  data::EpochBatches epoch(d.train, o, 1);
  PassBatches all(1, epoch, 7);
  for (int r = 0; r < 3; ++r) {
    PassBatches share = all.Dealt(r, 3);
    EXPECT_EQ(share.size(), 2);
    EXPECT_EQ(share.Locate(0).second, r);
    EXPECT_EQ(share.Locate(1).second, r + 3);
  }
  EXPECT_EQ(all.Dealt(0, 1).size(), 7);
}

}  // namespace
}  // namespace petra::engine

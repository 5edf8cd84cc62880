// NaN and Inf at a stage's boundary: fail naming the tensor, or skip the
// micro-batch on every stage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "services/engine/stage_worker.h"
#include "services/engine/stage_worker_test_support.h"

namespace petra::engine {
namespace {

TEST(StageWorker, NonFiniteLossFailsOrSkips) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  std::vector<data::Batch> batches = Batches(1, 8);
  torch::Tensor poisoned = batches[0].images.clone();
  poisoned[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  auto workers = Workers(spec, {{0, 10}});
  absl::StatusOr<LossOutput> failed =
      workers[0]->ForwardLoss(0, {poisoned, {}}, batches[0].labels, 0);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::HasSubstr("micro-batch 0"));

  spec.mutable_training()->set_non_finite(
      petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH);
  auto skipping = Workers(spec, {{0, 1}, {1, 10}});
  TensorPair h = *skipping[0]->Forward(0, {poisoned, {}}, 0);
  absl::StatusOr<LossOutput> skipped =
      skipping[1]->ForwardLoss(0, h, batches[0].labels, 1);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->backward.input_grad.a.abs().sum().item<double>(), 0.0);
  for (auto& p : skipping[1]->parameters()) {
    if (p.grad().defined()) {
      EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
    }
  }
}

// NaN and Inf at the stage boundary, not only in the loss: each tensor
// coming in or going out fails the stage naming stage, micro-batch and
// tensor (the default policy). The checks are read late, so the call that
// queued one returns, and the failure comes from the next read: the
// stage's next call, or SettleChecks at the end of a pass.
TEST(StageWorker, NonFiniteActivationsAndGradientsFailNamingTheTensor) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 1);
  // Stage 1 is one reversible block: it rebuilds its input from its output.
  auto workers = Workers(spec, {{0, 1}, {1, 2}, {2, 10}});
  ASSERT_TRUE(workers[1]->rebuilds_input());
  std::vector<data::Batch> batches = Batches(1, 8);
  const torch::Tensor& images = batches[0].images;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto message = [](const absl::Status& s) { return std::string(s.message()); };
  auto poison = [](const TensorPair& p, float v) {
    TensorPair out{p.a.clone(), p.b.defined() ? p.b.clone() : p.b};
    out.a.view({-1})[3] = v;
    return out;
  };

  ASSERT_TRUE(workers[0]->Forward(0, poison({images, {}}, nan), 0).ok());
  absl::Status s = workers[0]->SettleChecks();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(message(s),
              ::testing::HasSubstr("stage 0, micro-batch 0: the input "
                                   "activation holds NaN or Inf"));
  EXPECT_THAT(message(s), ::testing::HasSubstr("training.non_finite"));
  EXPECT_TRUE(workers[0]->SettleChecks().ok()) << "read once";

  TensorPair h = *workers[0]->Forward(1, {images, {}}, 0);
  ASSERT_TRUE(workers[1]->Forward(2, poison(h, inf), 1).ok());
  // One micro-batch behind: the stage's next call reports it.
  s = workers[1]->Forward(1, h, 1).status();
  EXPECT_THAT(message(s), ::testing::HasSubstr(
                              "stage 1, micro-batch 2: the input activation"));
  TensorPair y = *workers[1]->Forward(5, h, 1);
  EXPECT_TRUE(workers[1]->SettleChecks().ok());
  // The last stage reads its loss at once, and with it its input's check,
  // which names the cause.
  s = workers[2]
          ->ForwardLoss(3, poison(y, -inf), batches[0].labels, 2)
          .status();
  EXPECT_THAT(message(s), ::testing::HasSubstr(
                              "stage 2, micro-batch 3: the input activation"));

  LossOutput l = *workers[2]->ForwardLoss(5, y, batches[0].labels, 2);
  EXPECT_TRUE(workers[2]->SettleChecks().ok());
  // The rebuilding stage checks the output it rebuilds from ...
  ASSERT_TRUE(
      workers[1]
          ->Backward(5, poison(l.backward.input, nan), l.backward.input_grad, 3)
          .ok());
  s = workers[1]->SettleChecks();
  EXPECT_THAT(message(s),
              ::testing::HasSubstr("stage 1, micro-batch 5: the activation "
                                   "received for the backward"));
  // ... and every stage the gradient it receives.
  ASSERT_TRUE(workers[0]->Forward(4, {images, {}}, 4).ok());
  ASSERT_TRUE(workers[1]->Forward(4, h, 5).ok());
  ASSERT_TRUE(
      workers[1]
          ->Backward(4, l.backward.input, poison(l.backward.input_grad, nan), 6)
          .ok());
  s = workers[1]->SettleChecks();
  EXPECT_THAT(message(s), ::testing::HasSubstr(
                              "stage 1, micro-batch 4: the gradient received"));

  // A stage whose own weights went bad: its output, not its input.
  {
    torch::NoGradGuard no_grad;
    workers[0]->parameters()[0].view({-1})[0] = nan;
  }
  ASSERT_TRUE(workers[0]->Forward(6, {images, {}}, 7).ok());
  s = workers[0]->SettleChecks();
  EXPECT_THAT(message(s), ::testing::HasSubstr(
                              "stage 0, micro-batch 6: the output activation"));
}

// A gradient that overflows inside the stage: nothing of it is accumulated
// with the skip policy; the fail policy names it.
TEST(StageWorker, AGradientThatOverflowsIsCaughtBeforeItIsAccumulated) {
  for (auto policy :
       {petra::v1::TrainingSpec::NON_FINITE_POLICY_FAIL,
        petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH}) {
    petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 2);
    spec.mutable_training()->set_non_finite(policy);
    auto workers = Workers(spec, {{0, 1}, {1, 2}, {2, 10}});
    std::vector<data::Batch> batches = Batches(1, 8);
    TensorPair h = *workers[0]->Forward(0, {batches[0].images, {}}, 0);
    TensorPair y = *workers[1]->Forward(0, h, 1);
    // Finite, but the block's vector-Jacobian product overflows float32.
    TensorPair huge{torch::full_like(y.a, 3e38), torch::full_like(y.b, 3e38)};
    absl::StatusOr<BackwardOutput> b = workers[1]->Backward(0, y, huge, 2);
    if (policy == petra::v1::TrainingSpec::NON_FINITE_POLICY_FAIL) {
      // Read late (the stage's next call, or the end of its pass).
      ASSERT_TRUE(b.ok()) << b.status();
      const absl::Status s = workers[1]->SettleChecks();
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(std::string(s.message()),
                  ::testing::HasSubstr("stage 1, micro-batch 0: the gradient "
                                       "computed for the input"));
      continue;
    }
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(workers[1]->skipped_count(), 1);
    EXPECT_EQ(b->input_grad.a.abs().sum().item<double>(), 0.0);
    EXPECT_TRUE(torch::isfinite(b->input.a).all().item<bool>());
    for (const torch::Tensor& p : workers[1]->parameters()) {
      EXPECT_FALSE(p.grad().defined() &&
                   !torch::isfinite(p.grad()).all().item<bool>());
    }
  }
}

// The skip policy: a micro-batch with NaN goes through every stage without
// touching gradients or BN running statistics, the stages stay in step, and
// the next micro-batch trains normally.
TEST(StageWorker, NonFiniteActivationsAreSkippedOnEveryStage) {
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, 2);
  spec.mutable_training()->set_non_finite(
      petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH);
  auto workers = Workers(spec, {{0, 1}, {1, 2}, {2, 10}});
  std::vector<data::Batch> batches = Batches(2, 8);
  auto state = [&](int j) {
    std::vector<torch::Tensor> out;
    for (auto& t : workers[j]->state_tensors()) out.push_back(t.clone());
    for (auto& p : workers[j]->parameters()) {
      out.push_back(p.grad().defined() ? p.grad().clone()
                                       : torch::zeros_like(p));
    }
    return out;
  };
  std::vector<std::vector<torch::Tensor>> before = {state(0), state(1),
                                                    state(2)};
  torch::Tensor poisoned = batches[0].images.clone();
  poisoned[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();

  absl::StatusOr<TensorPair> h = workers[0]->Forward(0, {poisoned, {}}, 0);
  ASSERT_TRUE(h.ok()) << h.status();
  absl::StatusOr<TensorPair> y = workers[1]->Forward(0, *h, 1);
  ASSERT_TRUE(y.ok()) << y.status();
  absl::StatusOr<LossOutput> l =
      workers[2]->ForwardLoss(0, *y, batches[0].labels, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(std::isnan(l->loss));
  EXPECT_EQ(l->samples, 8);
  EXPECT_EQ(l->backward.input_grad.a.abs().sum().item<double>(), 0.0);
  absl::StatusOr<BackwardOutput> b1 =
      workers[1]->Backward(0, l->backward.input, l->backward.input_grad, 3);
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(b1->input_grad.a.abs().sum().item<double>(), 0.0);
  absl::StatusOr<BackwardOutput> b0 =
      workers[0]->Backward(0, b1->input, b1->input_grad, 4);
  ASSERT_TRUE(b0.ok()) << b0.status();
  for (int j = 0; j < 3; ++j) {
    EXPECT_TRUE(Same(before[j], state(j)))
        << "stage " << j << " changed its gradients or running statistics";
    EXPECT_EQ(workers[j]->skipped_count(), 1) << j;
    EXPECT_EQ(workers[j]->backward_count(), 1) << j;  // counted towards k
    EXPECT_EQ(workers[j]->in_flight(), 0) << j;
  }

  // The next micro-batch trains: k = 2 is reached and every stage steps.
  h = workers[0]->Forward(1, {batches[1].images, {}}, 5);
  ASSERT_TRUE(h.ok()) << h.status();
  y = workers[1]->Forward(1, *h, 6);
  ASSERT_TRUE(y.ok()) << y.status();
  l = workers[2]->ForwardLoss(1, *y, batches[1].labels, 7);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(std::isfinite(l->loss));
  b1 = workers[1]->Backward(1, l->backward.input, l->backward.input_grad, 8);
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_GT(b1->input_grad.a.abs().sum().item<double>(), 0.0);
  b0 = workers[0]->Backward(1, b1->input, b1->input_grad, 9);
  ASSERT_TRUE(b0.ok()) << b0.status();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(workers[j]->optimizer_steps(), 1) << j;
    EXPECT_EQ(workers[j]->skipped_count(), 1) << j;
    for (auto& t : workers[j]->state_tensors()) {
      EXPECT_TRUE(torch::isfinite(t).all().item<bool>()) << j;
    }
  }
}

}  // namespace
}  // namespace petra::engine

// Mode forward_gradient through the stage workers: the directional
// derivatives the last stage sends down are the exact gradient's projection
// on each stage's guess, and the auxiliary heads survive a checkpoint.
#include "services/engine/forward_gradient_stage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "services/data/batches.h"
#include "services/engine/forward_gradient_ops.h"
#include "services/engine/stage_worker.h"
#include "services/engine/stage_worker_test_support.h"
#include "services/job/job_spec_validation.h"
#include "services/model/batch_norm.h"
#include "services/model/forward_gradient.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

using model::TensorPair;
using ::testing::HasSubstr;
using Guess = petra::v1::ForwardGradientSpec::Guess;

petra::v1::JobSpec Spec(petra::v1::Architecture arch, Guess guess) {
  petra::v1::JobSpec s;
  stage_testing::SetSmallModel(arch, s.mutable_model());
  s.mutable_model()->set_variant(petra::v1::VARIANT_MNIST);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_partition()->set_stage_count(3);
  s.mutable_training()->set_mode(petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
  s.mutable_training()->mutable_forward_gradient()->set_guess(guess);
  // Frozen weights: the reference gradient is taken at the same ones.
  s.mutable_optimizer()->set_learning_rate(0);
  s.set_seed(5);
  absl::StatusOr<petra::v1::JobSpec> r = job::ResolveJobSpec(s);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

struct Pipeline {
  model::Network net;
  std::vector<std::unique_ptr<StageWorker>> workers;
};

// Three stages over the network's blocks: [0, 1), [1, n - 1), [n - 1, n).
Pipeline Build(const petra::v1::JobSpec& spec) {
  Pipeline p{*model::BuildNetwork(spec.model(), spec.seed()), {}};
  const int n = static_cast<int>(p.net.blocks.size());
  const int bounds[4] = {0, 1, n - 1, n};
  for (int j = 0; j < 3; ++j) {
    StageConfig c;
    c.index = j;
    c.count = 3;
    c.first_block = bounds[j];
    p.workers.push_back(std::make_unique<StageWorker>(
        std::vector<std::shared_ptr<model::Block>>(
            p.net.blocks.begin() + bounds[j],
            p.net.blocks.begin() + bounds[j + 1]),
        c, spec, LrSchedule(spec, 100)));
  }
  return p;
}

// The mode's parts, as its ops run them.
absl::StatusOr<TangentForward> ForwardTangents(
    StageWorker& w, uint64_t id, const TensorPair& x,
    const std::vector<TensorPair>& tangents, const torch::Tensor& labels,
    int64_t tick) {
  return dynamic_cast<ForwardGradientOps&>(w.mode_ops())
      .ForwardTangents(w, id, x, tangents, labels, tick);
}
absl::StatusOr<BackwardOutput> ApplyDirectional(
    StageWorker& w, uint64_t id, const std::vector<double>& directional,
    const TensorPair& output_grad, int64_t tick) {
  return dynamic_cast<ForwardGradientOps&>(w.mode_ops())
      .ApplyDirectional(w, id, directional, output_grad, tick);
}

data::Batch OneBatch() {
  data::Splits s = data::MakeSynthetic({1, 28, 28}, 10, 16, 8, 4);
  data::BatchOptions o;
  o.batch_size = 16;
  return data::EpochBatches(s.train, o, 0).Get(0).value();
}

class DirectionalDerivative : public ::testing::TestWithParam<
                                  std::pair<petra::v1::Architecture, Guess>> {};

TEST_P(DirectionalDerivative, IsTheExactGradientAlongEachStagesGuess) {
  const auto [arch, guess] = GetParam();
  const petra::v1::JobSpec spec = Spec(arch, guess);
  Pipeline p = Build(spec);
  const data::Batch b = OneBatch();

  auto f0 = ForwardTangents(*p.workers[0], 0, {b.images, {}}, {}, b.labels, 0);
  ASSERT_TRUE(f0.ok()) << f0.status();
  ASSERT_EQ(f0->tangents.size(), 1u);
  auto f1 =
      ForwardTangents(*p.workers[1], 0, f0->output, f0->tangents, b.labels, 1);
  ASSERT_TRUE(f1.ok()) << f1.status();
  ASSERT_EQ(f1->tangents.size(), 2u);
  auto loss =
      dynamic_cast<ForwardGradientOps&>(p.workers[2]->mode_ops())
          .LossAlong(*p.workers[2], 0, f1->output, b.labels, 2, f1->tangents);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_EQ(loss->directional.size(), 2u);

  // The reference: the whole network with one graph, in batch statistics
  // as every training forward, at the same (frozen) weights.
  model::ScopedBnMode mode(model::BnMode::kBatchStats);
  TensorPair h{b.images, {}};
  for (auto& block : p.net.blocks) h = block->Forward(h);
  torch::Tensor l = torch::nn::functional::cross_entropy(h.a, b.labels);
  EXPECT_NEAR(l.item<double>(), loss->loss, 1e-5);
  const std::vector<torch::Tensor>* guesses[2] = {&f0->guess, &f1->guess};
  for (int j = 0; j < 2; ++j) {
    std::vector<torch::Tensor> params = p.workers[j]->parameters();
    std::vector<torch::Tensor> g = torch::autograd::grad(
        {l}, params, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i) {
      if (!g[i].defined()) g[i] = torch::zeros_like(params[i]);
    }
    const double exact = model::Dot(g, *guesses[j]);
    EXPECT_NEAR(loss->directional[j], exact, 1e-4 * std::abs(exact) + 1e-7)
        << "stage " << j;
    if (guess == petra::v1::ForwardGradientSpec::GUESS_LOCAL) {
      EXPECT_NEAR(model::Dot(*guesses[j], *guesses[j]), 1.0, 1e-6);
    }
  }

  // Each stage takes its own value off the end of the list.
  auto u1 = ApplyDirectional(*p.workers[1], 0, loss->directional, {}, 3);
  ASSERT_TRUE(u1.ok()) << u1.status();
  EXPECT_EQ(u1->samples, 16);
  auto u0 =
      ApplyDirectional(*p.workers[0], 0, {loss->directional.front()}, {}, 4);
  ASSERT_TRUE(u0.ok()) << u0.status();
  EXPECT_EQ(p.workers[0]->in_flight(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Blocks, DirectionalDerivative,
    ::testing::Values(std::pair{petra::v1::ARCHITECTURE_REVNET18,
                                petra::v1::ForwardGradientSpec::GUESS_LOCAL},
                      std::pair{petra::v1::ARCHITECTURE_REVNET18,
                                petra::v1::ForwardGradientSpec::GUESS_RANDOM},
                      std::pair{petra::v1::ARCHITECTURE_RESNET18,
                                petra::v1::ForwardGradientSpec::GUESS_LOCAL},
                      std::pair{petra::v1::ARCHITECTURE_REVVIT,
                                petra::v1::ForwardGradientSpec::GUESS_LOCAL},
                      std::pair{petra::v1::ARCHITECTURE_VIT,
                                petra::v1::ForwardGradientSpec::GUESS_RANDOM}),
    [](const auto& info) {
      return petra::v1::Architecture_Name(info.param.first) + "_" +
             petra::v1::ForwardGradientSpec::Guess_Name(info.param.second);
    });

// The diagnostic: a sampled micro-batch's true gradient comes down beside
// the derivatives, and each stage compares its estimate d·v with it. With
// the local guess (|v| = 1, <g, v> = d) the cosine is |d| / |g|.
TEST(ForwardGradientStage,
     TheDiagnosticComparesTheEstimateWithTheTrueGradient) {
  petra::v1::JobSpec spec = Spec(petra::v1::ARCHITECTURE_REVNET18,
                                 petra::v1::ForwardGradientSpec::GUESS_LOCAL);
  spec.mutable_training()->set_grad_diagnostics_every(2);
  Pipeline p = Build(spec);
  const data::Batch b = OneBatch();
  EXPECT_TRUE(ForwardGradientOps::Diagnoses(*p.workers[2], 0));
  EXPECT_FALSE(ForwardGradientOps::Diagnoses(*p.workers[2], 1));
  EXPECT_TRUE(ForwardGradientOps::Diagnoses(*p.workers[0], 2));
  auto f0 = ForwardTangents(*p.workers[0], 0, {b.images, {}}, {}, b.labels, 0);
  ASSERT_TRUE(f0.ok());
  auto f1 =
      ForwardTangents(*p.workers[1], 0, f0->output, f0->tangents, b.labels, 1);
  ASSERT_TRUE(f1.ok());
  auto loss =
      dynamic_cast<ForwardGradientOps&>(p.workers[2]->mode_ops())
          .LossAlong(*p.workers[2], 0, f1->output, b.labels, 2, f1->tangents);
  ASSERT_TRUE(loss.ok());

  model::ScopedBnMode mode(model::BnMode::kBatchStats);
  TensorPair h{b.images, {}};
  for (auto& block : p.net.blocks) h = block->Forward(h);
  torch::Tensor l = torch::nn::functional::cross_entropy(h.a, b.labels);
  std::vector<double> norms;
  for (int j = 0; j < 2; ++j) {
    std::vector<torch::Tensor> g = torch::autograd::grad(
        {l}, p.workers[j]->parameters(), {}, true, false, true);
    for (auto& t : g) {
      if (!t.defined()) t = torch::zeros({1});
    }
    norms.push_back(std::sqrt(model::Dot(g, g)));
  }

  auto u1 = ApplyDirectional(*p.workers[1], 0, loss->directional,
                             loss->backward.input_grad, 3);
  ASSERT_TRUE(u1.ok()) << u1.status();
  ASSERT_TRUE(u1->input_grad.a.defined());  // delta_1, for stage 0
  auto u0 = ApplyDirectional(*p.workers[0], 0, {loss->directional[0]},
                             u1->input_grad, 4);
  ASSERT_TRUE(u0.ok()) << u0.status();
  EXPECT_FALSE(u0->input_grad.a.defined());  // nothing below stage 0
  for (int j = 0; j < 2; ++j) {
    std::optional<GradientDiagnostic> d = p.workers[j]->last_diagnostic();
    ASSERT_TRUE(d.has_value()) << "stage " << j;
    const double expected = std::abs(loss->directional[j]) / norms[j];
    EXPECT_NEAR(d->cosine_similarity, expected, 1e-4) << "stage " << j;
    EXPECT_NEAR(d->norm_ratio, expected, 1e-4) << "stage " << j;
    // Never negative: d v points along g's side of v. (At initialisation
    // the local gradient is nearly orthogonal to the true one: about 0.005
    // here.)
    EXPECT_GT(d->cosine_similarity, 0) << "stage " << j;
  }
}

TEST(ForwardGradientStage, LocalOnlySendsNoTangentsAndStepsOnTheLocalGradient) {
  petra::v1::JobSpec spec =
      Spec(petra::v1::ARCHITECTURE_REVNET18,
           petra::v1::ForwardGradientSpec::GUESS_LOCAL_ONLY);
  spec.mutable_optimizer()->set_learning_rate(0.1);
  spec.mutable_optimizer()->set_momentum(0);
  spec.mutable_optimizer()->set_nesterov(false);
  spec.mutable_optimizer()->set_weight_decay(0);
  Pipeline p = Build(spec);
  const data::Batch b = OneBatch();
  auto f0 = ForwardTangents(*p.workers[0], 0, {b.images, {}}, {}, b.labels, 0);
  ASSERT_TRUE(f0.ok()) << f0.status();
  EXPECT_TRUE(f0->tangents.empty());
  EXPECT_GT(f0->local_loss, 0);
  std::vector<torch::Tensor> before;
  for (const auto& t : p.workers[0]->parameters()) before.push_back(t.clone());
  // The derivative that comes down is not used: the step is -lr * g_local.
  auto u = ApplyDirectional(*p.workers[0], 0, {123.0}, {}, 2);
  ASSERT_TRUE(u.ok()) << u.status();
  std::vector<torch::Tensor> after = p.workers[0]->parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(
        torch::allclose(after[i], before[i] - 0.1 * f0->guess[i], 1e-5, 1e-6))
        << "parameter " << i;
  }
}

TEST(ForwardGradientStage, TheAuxiliaryHeadIsCheckpointedAndRestored) {
  const petra::v1::JobSpec spec =
      Spec(petra::v1::ARCHITECTURE_REVNET18,
           petra::v1::ForwardGradientSpec::GUESS_LOCAL);
  Pipeline a = Build(spec);
  const data::Batch b = OneBatch();
  ASSERT_TRUE(
      ForwardTangents(*a.workers[0], 0, {b.images, {}}, {}, b.labels, 0).ok());
  ASSERT_TRUE(ApplyDirectional(*a.workers[0], 0, {0.5}, {}, 2).ok());
  std::map<std::string, torch::Tensor> saved;
  for (auto& [name, t] : a.workers[0]->NamedState(true)) saved[name] = t;
  ASSERT_TRUE(saved.count("aux_head.0.weight"));
  ASSERT_TRUE(saved.count("aux_head.0.bias"));
  // The export (no optimizer) holds the model alone.
  for (auto& [name, t] : a.workers[0]->NamedState(false)) {
    EXPECT_EQ(name.rfind("aux_head", 0), std::string::npos) << name;
  }

  Pipeline c = Build(spec);
  ASSERT_TRUE(c.workers[0]->LoadNamedState(saved, 1).ok());
  auto fa = ForwardTangents(*a.workers[0], 1, {b.images, {}}, {}, b.labels, 3);
  auto fc = ForwardTangents(*c.workers[0], 1, {b.images, {}}, {}, b.labels, 3);
  ASSERT_TRUE(fa.ok() && fc.ok());
  EXPECT_DOUBLE_EQ(fa->local_loss, fc->local_loss);
  ASSERT_EQ(fa->guess.size(), fc->guess.size());
  for (size_t i = 0; i < fa->guess.size(); ++i) {
    EXPECT_TRUE(torch::equal(fa->guess[i], fc->guess[i])) << i;
  }

  // A head for another number of classes is refused at once, with its
  // name; one of another width when the output shows it does not fit.
  saved["aux_head.0.weight"] = torch::zeros({7, 3});
  absl::Status s = Build(spec).workers[0]->LoadNamedState(saved, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("aux_head.0.weight"), std::string::npos) << s;
  saved["aux_head.0.weight"] = torch::zeros({10, 3});
  // (Its optimizer state must match it: a mismatch is refused on load.)
  ASSERT_TRUE(saved.count("optimizer.aux_head.0.weight.momentum_buffer"));
  EXPECT_FALSE(Build(spec).workers[0]->LoadNamedState(saved, 1).ok());
  saved["optimizer.aux_head.0.weight.momentum_buffer"] = torch::zeros({10, 3});
  Pipeline d = Build(spec);
  ASSERT_TRUE(d.workers[0]->LoadNamedState(saved, 1).ok());
  auto narrow =
      ForwardTangents(*d.workers[0], 1, {b.images, {}}, {}, b.labels, 3);
  EXPECT_EQ(narrow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.status().message().find("takes 3 features"),
            std::string::npos)
      << narrow.status();
}

TEST(ForwardGradientStage, RefusesWhatDoesNotFitTheStage) {
  const petra::v1::JobSpec spec =
      Spec(petra::v1::ARCHITECTURE_REVNET18,
           petra::v1::ForwardGradientSpec::GUESS_LOCAL);
  Pipeline p = Build(spec);
  const data::Batch b = OneBatch();
  // No labels: no local loss.
  auto s = ForwardTangents(*p.workers[0], 0, {b.images, {}}, {}, {}, 0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("labels"), std::string::npos);
  auto f0 = ForwardTangents(*p.workers[0], 0, {b.images, {}}, {}, b.labels, 0);
  ASSERT_TRUE(f0.ok());
  // Stage 1 needs exactly one tangent, shaped like its input.
  auto none = ForwardTangents(*p.workers[1], 0, f0->output, {}, b.labels, 1);
  EXPECT_NE(none.status().message().find("needs 1 tangents"), std::string::npos)
      << none.status();
  auto bad = ForwardTangents(*p.workers[1], 0, f0->output,
                             {{torch::zeros({1}), {}}}, b.labels, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  // Stage 0 takes one derivative, and a finite one.
  auto two = ApplyDirectional(*p.workers[0], 0, {1.0, 2.0}, {}, 2);
  EXPECT_NE(two.status().message().find("needs 1 directional"),
            std::string::npos)
      << two.status();
  auto f = ForwardTangents(*p.workers[0], 1, {b.images, {}}, {}, b.labels, 1);
  ASSERT_TRUE(f.ok());
  auto nan = ApplyDirectional(*p.workers[0], 1, {std::nan("")}, {}, 3);
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kFailedPrecondition);
  // The last stage takes no tangents of its own making.
  auto last = ForwardTangents(*p.workers[2], 2, f0->output, {}, b.labels, 1);
  EXPECT_EQ(last.status().code(), absl::StatusCode::kFailedPrecondition);
}

// What a forward receives is checked before it runs: a label per sample,
// one tangent per earlier stage (none under the local-only guess), each
// shaped like the activation; each refusal names what was wrong.
TEST(ForwardGradientStage, RefusesWhatDoesNotFitTheForward) {
  const petra::v1::JobSpec spec =
      Spec(petra::v1::ARCHITECTURE_REVNET18,
           petra::v1::ForwardGradientSpec::GUESS_LOCAL);
  ForwardGradientStage stage(spec, 2, LrSchedule(spec, 10), torch::kCPU);
  const TensorPair x{torch::zeros({4, 2, 8, 8}), torch::zeros({4, 2, 8, 8})};
  const torch::Tensor labels = torch::zeros({4}, torch::kInt64);
  const std::vector<TensorPair> two = {x, x};
  EXPECT_TRUE(stage.CheckArrived(7, x, two, labels).ok());
  auto message = [&](const std::vector<TensorPair>& tangents,
                     const torch::Tensor& l) {
    absl::Status s = stage.CheckArrived(7, x, tangents, l);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  EXPECT_THAT(message(two, torch::zeros({3}, torch::kInt64)),
              HasSubstr("needs the labels of its 4 samples"));
  EXPECT_THAT(message(two, torch::Tensor()),
              HasSubstr("needs the labels of its 4 samples"));
  EXPECT_THAT(
      message({x}, labels),
      HasSubstr("needs 2 tangents (one per earlier stage), received 1"));
  const TensorPair narrow{torch::zeros({4, 2, 4, 8}), x.b};
  EXPECT_THAT(message({x, narrow}, labels),
              HasSubstr("a tangent's shape differs from the activation's"));
  const TensorPair single{x.a, {}};
  EXPECT_THAT(message({x, single}, labels),
              HasSubstr("a tangent's shape differs from the activation's"));

  // Under the local-only guess no tangent comes.
  const petra::v1::JobSpec local =
      Spec(petra::v1::ARCHITECTURE_REVNET18,
           petra::v1::ForwardGradientSpec::GUESS_LOCAL_ONLY);
  ForwardGradientStage alone(local, 2, LrSchedule(local, 10), torch::kCPU);
  EXPECT_TRUE(alone.CheckArrived(7, x, {}, labels).ok());
  EXPECT_THAT(std::string(alone.CheckArrived(7, x, two, labels).message()),
              HasSubstr("needs 0 tangents"));
}

}  // namespace
}  // namespace petra::engine

#include "services/engine/torchscript_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <set>
#include <sstream>

#include "services/engine/export_input.h"
#include "services/job/job_spec_validation.h"
#include "services/model/batch_norm.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

using ::testing::HasSubstr;

petra::v1::JobSpec Spec(petra::v1::Architecture arch) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(arch);
  // i-RevNet has no mnist variant: CIFAR-10's shapes (3 channels) for it.
  s.mutable_dataset()->set_kind(arch == petra::v1::ARCHITECTURE_IREVNET18
                                    ? petra::v1::DATASET_KIND_CIFAR10
                                    : petra::v1::DATASET_KIND_FASHION_MNIST);
  if (arch == petra::v1::ARCHITECTURE_REVVIT) {
    auto* t = s.mutable_model()->mutable_transformer();
    t->set_embed_dim(16);
    t->set_depth(2);
    t->set_heads(2);
    t->set_patch_size(7);
  } else {
    s.mutable_model()->set_width(0.125);
  }
  s.set_seed(5);
  absl::StatusOr<petra::v1::JobSpec> r = job::ResolveJobSpec(s);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

// A network's tensors under the export's names, with BatchNorm statistics
// and constant-initialised tensors made random so they matter.
NamedTensors Weights(model::Network& net) {
  NamedTensors out;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < net.blocks.size(); ++i) {
    auto add = [&](const std::string& name, torch::Tensor t) {
      if (t.is_floating_point() && t.numel() > 0 &&
          t.min().item<double>() == t.max().item<double>()) {
        t.add_(torch::rand_like(t) * 0.5);
      }
      out["blocks." + std::to_string(i) + "." + name] = t;
    };
    for (auto& p : net.blocks[i]->named_parameters(true))
      add(p.key(), p.value());
    for (auto& b : net.blocks[i]->named_buffers(true)) add(b.key(), b.value());
  }
  return out;
}

// A model's input: normalisation, shape and class names.
petra::v1::Preprocessing Input(const model::Network& net,
                               std::vector<double> mean,
                               std::vector<double> std) {
  petra::v1::Preprocessing p;
  for (double v : mean) p.add_mean(v);
  for (double v : std) p.add_std(v);
  for (int64_t d : net.input_shape) p.add_input_shape(d);
  for (const char* n : {"zero", "one", "two"}) p.add_class_names(n);
  return p;
}

// `weights` with `input`'s input.* tensors, as an export holds them.
NamedTensors WithInput(NamedTensors weights,
                       const petra::v1::Preprocessing& input) {
  for (auto& [name, t] : InputTensors(input)) weights[name] = t;
  return weights;
}

// What StageWorker::Evaluate computes, on the normalised input.
torch::Tensor Evaluate(model::Network& net, torch::Tensor x,
                       const petra::v1::Preprocessing& in) {
  torch::NoGradGuard no_grad;
  model::ScopedBnMode running(model::BnMode::kRunningStats);
  const int64_t c = x.size(1);
  const std::vector<double> mean(in.mean().begin(), in.mean().end());
  const std::vector<double> std(in.std().begin(), in.std().end());
  x = (x - torch::tensor(mean).to(torch::kFloat32).view({1, c, 1, 1})) /
      torch::tensor(std).to(torch::kFloat32).view({1, c, 1, 1});
  model::TensorPair p{x, torch::Tensor()};
  for (auto& b : net.blocks) {
    b->eval();
    p = b->Forward(p);
  }
  return p.a;
}

class TorchScriptExport
    : public ::testing::TestWithParam<petra::v1::Architecture> {};

TEST_P(TorchScriptExport, LoadsWithoutPetraAndGivesTheSameLogits) {
  const petra::v1::JobSpec spec = Spec(GetParam());
  absl::StatusOr<model::Network> net = model::BuildNetwork(spec.model(), 1);
  ASSERT_TRUE(net.ok()) << net.status();
  const NamedTensors weights = Weights(*net);
  const bool rgb = net->input_shape[0] == 3;
  const petra::v1::Preprocessing in =
      rgb ? Input(*net, {0.49, 0.48, 0.45}, {0.25, 0.24, 0.26})
          : Input(*net, {0.2860}, {0.3530});
  absl::StatusOr<std::string> bytes =
      EncodeTorchScript(spec, WithInput(weights, in));
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  std::istringstream stream(*bytes);
  torch::jit::Module loaded = torch::jit::load(stream);
  loaded.eval();
  // Another batch size than the trace's, and values the trace never saw.
  std::vector<int64_t> shape = {5};
  shape.insert(shape.end(), net->input_shape.begin(), net->input_shape.end());
  const torch::Tensor x = torch::rand(shape);
  torch::Tensor got;
  {
    torch::NoGradGuard no_grad;
    got = loaded.forward({x}).toTensor();
  }
  const torch::Tensor want = Evaluate(*net, x, in);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5))
      << (got - want).abs().max().item<double>();
  // Running statistics, not the batch's: a sample alone gives its logits.
  torch::Tensor alone;
  {
    torch::NoGradGuard no_grad;
    alone = loaded.forward({x.narrow(0, 1, 1)}).toTensor();
  }
  EXPECT_TRUE(torch::allclose(alone, got.narrow(0, 1, 1), 1e-5, 1e-5));
  // The module's tensors carry the export's names, the input's included,
  // and it names the classes.
  size_t named = 0;
  for (const auto& p : loaded.named_parameters(true)) {
    EXPECT_EQ(weights.count(p.name), 1u) << p.name;
    ++named;
  }
  EXPECT_GT(named, 0u);
  std::set<std::string> buffers;
  for (const auto& b : loaded.named_buffers(true)) buffers.insert(b.name);
  for (const char* name :
       {"input.mean", "input.std", "input.shape", "input.class_names"}) {
    EXPECT_EQ(buffers.count(name), 1u) << name;
  }
  c10::List<c10::IValue> names = loaded.attr("class_names").toList();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names.get(2).toStringRef(), "two");
}

INSTANTIATE_TEST_SUITE_P(Zoo, TorchScriptExport,
                         ::testing::Values(petra::v1::ARCHITECTURE_REVNET18,
                                           petra::v1::ARCHITECTURE_RESNET18,
                                           petra::v1::ARCHITECTURE_IREVNET18,
                                           petra::v1::ARCHITECTURE_REVVIT));

TEST(TorchScriptExportErrors, NameTheMissingOrMisshapenTensor) {
  const petra::v1::JobSpec spec = Spec(petra::v1::ARCHITECTURE_REVNET18);
  absl::StatusOr<model::Network> net = model::BuildNetwork(spec.model(), 1);
  ASSERT_TRUE(net.ok());
  const petra::v1::Preprocessing grey = Input(*net, {0.5}, {0.25});
  NamedTensors weights = WithInput(Weights(*net), grey);
  weights.erase("blocks.9.fc.bias");
  absl::StatusOr<std::string> r = EncodeTorchScript(spec, weights);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("blocks.9.fc.bias"));
  weights = WithInput(Weights(*net), grey);
  weights["blocks.9.fc.bias"] = torch::zeros({3});
  r = EncodeTorchScript(spec, weights);
  EXPECT_THAT(r.status().message(), HasSubstr("has shape [3]"));
  // The input is for another network, or missing.
  petra::v1::Preprocessing rgb = Input(*net, {0.1, 0.2, 0.3}, {1, 1, 1});
  rgb.set_input_shape(0, 3);
  r = EncodeTorchScript(spec, WithInput(Weights(*net), rgb));
  EXPECT_THAT(r.status().message(),
              HasSubstr("input.* tensors are for an input of shape [3, 28, "
                        "28], the network takes [1, 28, 28]"));
  r = EncodeTorchScript(spec, Weights(*net));
  EXPECT_THAT(r.status().message(), HasSubstr("no input.* tensors"));
  // Strict: a tensor the network lacks is another network's.
  weights = WithInput(Weights(*net), grey);
  weights["blocks.10.fc.bias"] = torch::zeros({10});
  r = EncodeTorchScript(spec, weights);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("\"blocks.10.fc.bias\" is not a tensor of the "
                        "network (10 blocks)"));
}

// A language model's module takes token ids of the traced length and
// returns the logits at every position, as the network computes them.
TEST(TorchScriptExportLanguageModel, TakesTokenIdsAndGivesTheSameLogits) {
  for (auto arch :
       {petra::v1::ARCHITECTURE_REVLM, petra::v1::ARCHITECTURE_GPT}) {
    petra::v1::JobSpec raw;
    raw.mutable_model()->set_architecture(arch);
    raw.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
    auto* t = raw.mutable_model()->mutable_transformer();
    t->set_embed_dim(16);
    t->set_depth(2);
    t->set_heads(2);
    t->set_seq_len(12);
    absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(raw);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<model::Network> net = model::BuildNetwork(spec->model(), 1);
    ASSERT_TRUE(net.ok()) << net.status();
    petra::v1::Preprocessing in;
    in.add_input_shape(12);
    NamedTensors weights = WithInput(Weights(*net), in);
    absl::StatusOr<std::string> bytes = EncodeTorchScript(*spec, weights);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    std::istringstream stream(*bytes);
    torch::jit::Module loaded = torch::jit::load(stream);
    loaded.eval();
    const torch::Tensor tokens = torch::randint(0, 256, {3, 12}, torch::kInt64);
    torch::NoGradGuard no_grad;
    const torch::Tensor got = loaded.forward({tokens}).toTensor();
    model::TensorPair p{tokens, torch::Tensor()};
    for (auto& b : net->blocks) p = b->Forward(p);
    ASSERT_EQ(got.sizes(), p.a.sizes());
    EXPECT_EQ(got.sizes(), (std::vector<int64_t>{3, 12, 256}));
    EXPECT_TRUE(torch::allclose(got, p.a, 1e-5, 1e-5))
        << (got - p.a).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace petra::engine

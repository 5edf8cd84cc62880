// revlm and gpt (issue 50): causal decoders over token ids, built from the
// blueprint as every network is.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "services/model/network.h"
#include "services/model/reversible_block.h"
#include "services/model/transformer_blocks.h"

namespace petra::model {
namespace {

petra::v1::ModelSpec LanguageModel(petra::v1::Architecture arch) {
  petra::v1::ModelSpec m;
  m.set_architecture(arch);
  m.set_width(1);
  m.set_num_classes(256);
  petra::v1::TransformerSpec* t = m.mutable_transformer();
  t->set_embed_dim(16);
  t->set_depth(3);
  t->set_heads(2);
  t->set_mlp_ratio(2);
  t->set_seq_len(12);
  t->set_vocab(256);
  return m;
}

torch::Tensor Logits(const Network& net, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  TensorPair x{tokens, {}};
  for (const auto& b : net.blocks) x = b->Forward(x);
  return x.a;
}

class LanguageModelTest
    : public ::testing::TestWithParam<petra::v1::Architecture> {};

TEST_P(LanguageModelTest, MapsTokensToNextTokenLogitsAtEveryPosition) {
  absl::StatusOr<NetworkBlueprint> blueprint =
      DescribeNetwork(LanguageModel(GetParam()));
  ASSERT_TRUE(blueprint.ok()) << blueprint.status();
  EXPECT_EQ(blueprint->size(), 3 + 2);
  EXPECT_EQ(blueprint->input_shape, std::vector<int64_t>{12});
  EXPECT_EQ(blueprint->input_dtype, torch::kInt64);
  absl::StatusOr<Network> net = BuildNetwork(LanguageModel(GetParam()), 5);
  ASSERT_TRUE(net.ok());
  const bool rev = GetParam() == petra::v1::ARCHITECTURE_REVLM;
  EXPECT_EQ(net->blocks.front()->kind(), "stem");
  EXPECT_EQ(net->blocks[1]->reversible(), rev);
  EXPECT_EQ(net->blocks.back()->kind(), "head");
  torch::Tensor tokens = ExampleInput(*blueprint, 4).random_(256);
  EXPECT_EQ(Logits(*net, tokens).sizes(), (std::vector<int64_t>{4, 12, 256}));
  // Shorter sequences than seq_len too (generation grows one token at a
  // time).
  EXPECT_EQ(Logits(*net, tokens.narrow(1, 0, 5)).sizes(),
            (std::vector<int64_t>{4, 5, 256}));
}

// Weight decay skips the token and position embeddings, norms and biases
// (GPT-2/3, nanoGPT), and takes every matrix of attention, MLP and head.
TEST_P(LanguageModelTest, WeightDecaySkipsEmbeddingsNormsAndBiases) {
  absl::StatusOr<Network> net = BuildNetwork(LanguageModel(GetParam()), 5);
  ASSERT_TRUE(net.ok());
  std::vector<std::string> decayed;
  for (size_t i = 0; i < net->blocks.size(); ++i) {
    const Block& b = *net->blocks[i];
    const std::vector<bool> mask = b.weight_decay_mask();
    const auto params = b.named_parameters();
    ASSERT_EQ(mask.size(), params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      if (mask[p]) {
        decayed.push_back(std::to_string(i) + "." + params[p].key());
      }
    }
  }
  const std::vector<std::string> want = {"1.attention.qkv.weight",
                                         "1.attention.proj.weight",
                                         "1.mlp.fc1.weight",
                                         "1.mlp.fc2.weight",
                                         "2.attention.qkv.weight",
                                         "2.attention.proj.weight",
                                         "2.mlp.fc1.weight",
                                         "2.mlp.fc2.weight",
                                         "3.attention.qkv.weight",
                                         "3.attention.proj.weight",
                                         "3.mlp.fc1.weight",
                                         "3.mlp.fc2.weight",
                                         "4.fc.weight"};
  EXPECT_EQ(decayed, want);
}

TEST_P(LanguageModelTest, NoPositionSeesALaterToken) {
  absl::StatusOr<Network> net = BuildNetwork(LanguageModel(GetParam()), 5);
  ASSERT_TRUE(net.ok());
  torch::manual_seed(2);
  torch::Tensor tokens = torch::randint(256, {2, 12}, torch::kInt64);
  torch::Tensor changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 7},
                     (tokens.select(1, 7) + 1) % 256);
  torch::Tensor a = Logits(*net, tokens), b = Logits(*net, changed);
  // Positions 0..6 cannot tell; position 7 and later must.
  EXPECT_TRUE(torch::equal(a.narrow(1, 0, 7), b.narrow(1, 0, 7)));
  EXPECT_FALSE(torch::allclose(a.narrow(1, 7, 5), b.narrow(1, 7, 5)));
}

int64_t ParameterCount(const Network& net) {
  int64_t n = 0;
  for (const auto& b : net.blocks) {
    for (const torch::Tensor& p : b->parameters()) n += p.numel();
  }
  return n;
}

// --tie-embeddings: the head has no weight of its own, reads the token
// embedding's, and that one tensor's gradient sums both uses.
TEST_P(LanguageModelTest, ATiedHeadReadsTheEmbeddingAndItsGradientSumsBoth) {
  petra::v1::ModelSpec spec = LanguageModel(GetParam());
  absl::StatusOr<Network> untied = BuildNetwork(spec, 5);
  spec.mutable_transformer()->set_tie_embeddings(true);
  absl::StatusOr<Network> tied = BuildNetwork(spec, 5);
  ASSERT_TRUE(untied.ok() && tied.ok());
  const int64_t features =
      GetParam() == petra::v1::ARCHITECTURE_REVLM ? 2 * 16 : 16;
  EXPECT_EQ(ParameterCount(*untied) - ParameterCount(*tied),
            256 * features + 256);  // the head's weight and bias
  auto& head = static_cast<LmHeadBlock&>(*tied->blocks.back());
  ASSERT_TRUE(head.tied());

  torch::Tensor tokens = torch::randint(100, {2, 12}, torch::kInt64);
  torch::Tensor before = Logits(*tied, tokens);
  torch::Tensor embedding =
      static_cast<TokenEmbedBlock&>(*tied->blocks.front()).token_weight();
  {
    // Token 200 is in no input: only the head reads its row.
    torch::NoGradGuard no_grad;
    embedding[200].add_(1.0);
  }
  torch::Tensor after = Logits(*tied, tokens);
  EXPECT_FALSE(torch::allclose(before.select(-1, 200), after.select(-1, 200)));
  EXPECT_TRUE(
      torch::equal(before.narrow(-1, 0, 200), after.narrow(-1, 0, 200)));

  TensorPair x{tokens, {}};
  for (const auto& b : tied->blocks) x = b->Forward(x);
  torch::nn::functional::cross_entropy(x.a.reshape({-1, 256}),
                                       tokens.roll(-1, 1).reshape({-1}))
      .backward();
  // The head's gradient on an unused row, the stem's on a used one.
  EXPECT_GT(embedding.grad()[200].abs().sum().item<double>(), 0);
  EXPECT_GT(
      embedding.grad()[tokens[0][0].item<int64_t>()].abs().sum().item<double>(),
      0);
}

// A stage holds both tied ends or neither.
TEST_P(LanguageModelTest, TiedEndsMustShareAStage) {
  petra::v1::ModelSpec spec = LanguageModel(GetParam());
  spec.mutable_transformer()->set_tie_embeddings(true);
  absl::StatusOr<NetworkBlueprint> blueprint = DescribeNetwork(spec);
  ASSERT_TRUE(blueprint.ok());
  EXPECT_TRUE(CheckTiedEnds(*blueprint, 0, 5).ok());
  EXPECT_TRUE(CheckTiedEnds(*blueprint, 1, 3).ok());
  EXPECT_EQ(CheckTiedEnds(*blueprint, 0, 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckTiedEnds(*blueprint, 3, 5).code(),
            absl::StatusCode::kInvalidArgument);
  // Built alone (to count or profile it), the head still runs.
  std::shared_ptr<Block> head = BuildBlocks(*blueprint, 4, 5, 1)[0];
  TensorPair x{torch::randn({1, 3, 16}), {}};
  if (GetParam() == petra::v1::ARCHITECTURE_REVLM)
    x.b = torch::randn({1, 3, 16});
  EXPECT_EQ(head->Forward(x).a.sizes(), (std::vector<int64_t>{1, 3, 256}));
}

INSTANTIATE_TEST_SUITE_P(
    RevLMAndGpt, LanguageModelTest,
    ::testing::Values(petra::v1::ARCHITECTURE_REVLM,
                      petra::v1::ARCHITECTURE_GPT),
    [](const ::testing::TestParamInfo<petra::v1::Architecture>& info) {
      return info.param == petra::v1::ARCHITECTURE_REVLM ? "RevLM" : "GPT";
    });

// A causal block's input follows from its output, and the rebuild's
// gradients are autograd's: what PETRA's backward relies on.
TEST(LanguageModel, ACausalBlockInvertsAndItsRebuildGivesAutogradsGradients) {
  torch::manual_seed(4);
  TransformerOptions o;
  o.embed_dim = 8;
  o.heads = 2;
  o.mlp_hidden = 16;
  o.causal = true;
  RevViTBlock block(o);
  block.to(torch::kFloat64);
  TensorPair x{torch::randn({2, 6, 8}, torch::kFloat64),
               torch::randn({2, 6, 8}, torch::kFloat64)};
  TensorPair y;
  {
    torch::NoGradGuard no_grad;
    y = block.Forward(x);
    TensorPair back = block.Inverse(y);
    EXPECT_TRUE(torch::allclose(back.a, x.a, 1e-9, 1e-9));
    EXPECT_TRUE(torch::allclose(back.b, x.b, 1e-9, 1e-9));
  }
  TensorPair dy{torch::randn_like(y.a), torch::randn_like(y.b)};
  Rebuilt r = block.RebuildWithVjp(y, dy);
  TensorPair xg{x.a.clone().requires_grad_(true),
                x.b.clone().requires_grad_(true)};
  TensorPair out = block.Forward(xg);
  torch::autograd::backward({out.a, out.b}, {dy.a, dy.b});
  EXPECT_TRUE(torch::allclose(r.input_grad.a, xg.a.grad(), 1e-8, 1e-9));
  EXPECT_TRUE(torch::allclose(r.input_grad.b, xg.b.grad(), 1e-8, 1e-9));
  const std::vector<torch::Tensor> params = block.parameters();
  ASSERT_EQ(r.parameter_grads.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(
        torch::allclose(r.parameter_grads[i], params[i].grad(), 1e-8, 1e-9))
        << i;
  }
}

}  // namespace
}  // namespace petra::model

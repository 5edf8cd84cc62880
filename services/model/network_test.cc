#include "services/model/network.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/catalog/architecture_catalog.h"
#include "services/job/job_spec_defaults.h"
#include "services/model/batch_norm.h"
#include "services/model/network_summary.h"
#include "services/model/partition_plan.h"
#include "services/model/reversible_block.h"

namespace petra::model {
namespace {

// `depth`: a transformer's blocks (0: the default).
petra::v1::ModelSpec Spec(petra::v1::Architecture arch,
                          petra::v1::Variant variant, double width = 1.0,
                          uint32_t depth = 0) {
  petra::v1::JobSpec job;
  job.mutable_model()->set_architecture(arch);
  job.mutable_model()->set_variant(variant);
  job.mutable_model()->set_width(width);
  if (depth > 0) job.mutable_model()->mutable_transformer()->set_depth(depth);
  job.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  job::ApplyJobSpecDefaults(&job);
  return job.model();
}

struct CountCase {
  petra::v1::Architecture arch;
  double paper_millions;
  int blocks;
};

void PrintTo(const CountCase& c, std::ostream* os) {
  *os << petra::v1::Architecture_Name(c.arch);
}

class ImagenetParameterCount : public ::testing::TestWithParam<CountCase> {};

TEST_P(ImagenetParameterCount, WithinOnePercentOfThePaper) {
  absl::StatusOr<Network> net =
      BuildNetwork(Spec(GetParam().arch, petra::v1::VARIANT_IMAGENET), 0);
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(static_cast<int>(net->blocks.size()), GetParam().blocks);
  int64_t params = 0;
  for (auto& b : net->blocks) params += CountParameters(*b);
  const double millions = params / 1e6;
  EXPECT_NEAR(millions, GetParam().paper_millions,
              0.01 * GetParam().paper_millions)
      << params << " parameters";
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ImagenetParameterCount,
    ::testing::Values(CountCase{petra::v1::ARCHITECTURE_REVNET18, 12.2, 10},
                      CountCase{petra::v1::ARCHITECTURE_REVNET34, 22.3, 18},
                      CountCase{petra::v1::ARCHITECTURE_REVNET50, 30.4, 18},
                      CountCase{petra::v1::ARCHITECTURE_RESNET18, 11.7, 10},
                      CountCase{petra::v1::ARCHITECTURE_RESNET34, 21.8, 18},
                      CountCase{petra::v1::ARCHITECTURE_RESNET50, 25.6, 18}),
    [](const auto& info) {
      return petra::v1::Architecture_Name(info.param.arch).substr(13);
    });

// Counted a block at a time: ImageNet-size networks are large.
int64_t Parameters(const petra::v1::ModelSpec& model) {
  absl::StatusOr<NetworkBlueprint> net = DescribeNetwork(model);
  EXPECT_TRUE(net.ok()) << net.status();
  int64_t params = 0;
  for (int i = 0; i < net->size(); ++i) {
    params += CountParameters(*BuildBlocks(*net, i, i + 1, 0)[0]);
  }
  return params;
}

int64_t BlueprintParameters(petra::v1::Architecture arch) {
  return Parameters(Spec(arch, petra::v1::VARIANT_IMAGENET));
}

// The 101-layer pair. ResNet101 is torchvision's resnet101 (44,549,160
// parameters, its documented count; resnet50: 25,557,032). The paper stops at
// RevNet50, so RevNet101 is checked by construction: it is RevNet50 with 17
// more layer-3 blocks, each a bottleneck the size of ResNet's, and must exceed
// RevNet50 by exactly what ResNet101 exceeds ResNet50.
TEST(Zoo, The101LayerNetworksMatchTheirReferences) {
  EXPECT_EQ(BlueprintParameters(petra::v1::ARCHITECTURE_RESNET101), 44549160);
  EXPECT_EQ(BlueprintParameters(petra::v1::ARCHITECTURE_RESNET50), 25557032);
  EXPECT_EQ(BlueprintParameters(petra::v1::ARCHITECTURE_REVNET101) -
                BlueprintParameters(petra::v1::ARCHITECTURE_REVNET50),
            44549160 - 25557032);
  for (petra::v1::Architecture a :
       {petra::v1::ARCHITECTURE_RESNET101, petra::v1::ARCHITECTURE_REVNET101}) {
    absl::StatusOr<NetworkBlueprint> net =
        DescribeNetwork(Spec(a, petra::v1::VARIANT_IMAGENET));
    ASSERT_TRUE(net.ok());
    EXPECT_EQ(net->size(), 35);  // stem, 33 blocks, head
  }
}

// ViT-B/16 and its reversible twin at 224x224 (embed 768, depth 12, 12
// heads, MLP 3072, patch 16).
int64_t BaseTransformerParameters(petra::v1::Architecture arch) {
  petra::v1::JobSpec job;
  job.mutable_model()->set_architecture(arch);
  job.mutable_model()->set_variant(petra::v1::VARIANT_IMAGENET);
  petra::v1::TransformerSpec* t = job.mutable_model()->mutable_transformer();
  t->set_embed_dim(768);
  t->set_depth(12);
  t->set_heads(12);
  t->set_mlp_ratio(4);
  t->set_patch_size(16);
  t->set_stem(petra::v1::TransformerSpec::STEM_PATCH);  // as torchvision's
  job.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  job::ApplyJobSpecDefaults(&job);
  return Parameters(job.model());
}

// ViT-B is torchvision's vit_b_16 (86,567,656) less its class token and that
// token's position embedding (2 x 768: ours averages the patch tokens).
// RevViT-B adds only its head's reading of both streams (1536 wide: 768 x
// 1000 more weights, 2 x 768 more LayerNorm parameters): 87.3M, the RevViT
// paper's "87M" for Rev-ViT-B.
TEST(Zoo, TheBaseTransformersMatchTheirReferences) {
  const int64_t vit = BaseTransformerParameters(petra::v1::ARCHITECTURE_VIT);
  EXPECT_EQ(vit, 86567656 - 2 * 768);
  EXPECT_EQ(BaseTransformerParameters(petra::v1::ARCHITECTURE_REVVIT),
            vit + 768 * 1000 + 2 * 768);
}

struct InverseCase {
  petra::v1::Architecture arch;
  petra::v1::Variant variant;
  double width;
  uint32_t depth = 0;  // transformers
};

void PrintTo(const InverseCase& c, std::ostream* os) {
  *os << petra::v1::Architecture_Name(c.arch) << "/"
      << petra::v1::Variant_Name(c.variant);
}

class ReversibleInverse : public ::testing::TestWithParam<InverseCase> {};

// inverse(forward(x)) == x for every reversible block, on the activations the
// network really produces at that depth.
TEST_P(ReversibleInverse, RebuildsTheInput) {
  absl::StatusOr<Network> net =
      BuildNetwork(Spec(GetParam().arch, GetParam().variant, GetParam().width,
                        GetParam().depth),
                   3);
  ASSERT_TRUE(net.ok()) << net.status();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> shape = {4};
  shape.insert(shape.end(), net->input_shape.begin(), net->input_shape.end());
  TensorPair x{torch::randn(shape), {}};
  int reversible = 0;
  for (auto& block : net->blocks) {
    TensorPair y = block->Forward(x);
    if (block->reversible()) {
      ++reversible;
      TensorPair back = static_cast<ReversibleBlock&>(*block).Inverse(y);
      for (auto [orig, rebuilt] :
           {std::pair{x.a, back.a}, std::pair{x.b, back.b}}) {
        double scale = orig.abs().max().item<double>();
        double err = (orig - rebuilt).abs().max().item<double>();
        EXPECT_LE(err, 1e-5 * scale)
            << block->kind() << " block " << reversible;
      }
    }
    x = y;
  }
  EXPECT_GT(reversible, 0);
}

// A reversible block's backward step gives what autograd through its
// Forward gives: the input, dL/dx and dL/dθ, from the output alone.
TEST_P(ReversibleInverse, RebuildWithVjpMatchesAutogradThroughForward) {
  absl::StatusOr<Network> net =
      BuildNetwork(Spec(GetParam().arch, GetParam().variant, GetParam().width,
                        GetParam().depth),
                   5);
  ASSERT_TRUE(net.ok()) << net.status();
  ScopedBnMode batch_stats(BnMode::kBatchStats);
  std::vector<int64_t> shape = {4};
  shape.insert(shape.end(), net->input_shape.begin(), net->input_shape.end());
  TensorPair x{torch::randn(shape), {}};
  auto close = [](const torch::Tensor& want, const torch::Tensor& got) {
    const double scale = std::max(1e-6, want.abs().max().item<double>());
    return (want - got).abs().max().item<double>() <= 1e-4 * scale;
  };
  int checked = 0;
  for (auto& block : net->blocks) {
    if (!block->reversible()) {
      torch::NoGradGuard no_grad;
      x = block->Forward(x);
      continue;
    }
    auto& rev = static_cast<ReversibleBlock&>(*block);
    TensorPair in{x.a.detach().requires_grad_(true),
                  x.b.detach().requires_grad_(true)};
    TensorPair y = rev.Forward(in);
    TensorPair dy{torch::randn_like(y.a), torch::randn_like(y.b)};
    std::vector<torch::Tensor> wrt = {in.a, in.b};
    std::vector<torch::Tensor> params = rev.parameters();
    wrt.insert(wrt.end(), params.begin(), params.end());
    std::vector<torch::Tensor> want =
        torch::autograd::grad({y.a, y.b}, wrt, {dy.a, dy.b}, false, false,
                              /*allow_unused=*/true);
    Rebuilt got = rev.RebuildWithVjp(y.detach(), dy);
    const std::string where =
        block->kind() + " block " + std::to_string(checked);
    EXPECT_TRUE(close(x.a, got.input.a)) << where;
    EXPECT_TRUE(close(x.b, got.input.b)) << where;
    EXPECT_TRUE(close(want[0], got.input_grad.a)) << where;
    EXPECT_TRUE(close(want[1], got.input_grad.b)) << where;
    ASSERT_EQ(got.parameter_grads.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_EQ(want[2 + i].defined(), got.parameter_grads[i].defined());
      if (want[2 + i].defined()) {
        EXPECT_TRUE(close(want[2 + i], got.parameter_grads[i]))
            << where << " parameter " << i;
      }
    }
    x = y.detach();
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ReversibleInverse,
    ::testing::Values(InverseCase{petra::v1::ARCHITECTURE_REVNET18,
                                  petra::v1::VARIANT_MNIST, 0.25},
                      InverseCase{petra::v1::ARCHITECTURE_REVNET18,
                                  petra::v1::VARIANT_CIFAR, 0.25},
                      InverseCase{petra::v1::ARCHITECTURE_REVNET18,
                                  petra::v1::VARIANT_IMAGENET, 0.125},
                      InverseCase{petra::v1::ARCHITECTURE_REVNET34,
                                  petra::v1::VARIANT_CIFAR, 0.25},
                      InverseCase{petra::v1::ARCHITECTURE_REVNET34,
                                  petra::v1::VARIANT_MNIST, 0.25},
                      InverseCase{petra::v1::ARCHITECTURE_REVNET50,
                                  petra::v1::VARIANT_CIFAR, 0.125},
                      InverseCase{petra::v1::ARCHITECTURE_REVNET50,
                                  petra::v1::VARIANT_IMAGENET, 0.0625},
                      InverseCase{petra::v1::ARCHITECTURE_IREVNET18,
                                  petra::v1::VARIANT_CIFAR, 0.25},
                      InverseCase{petra::v1::ARCHITECTURE_IREVNET18,
                                  petra::v1::VARIANT_IMAGENET, 0.0625},
                      InverseCase{petra::v1::ARCHITECTURE_REVVIT,
                                  petra::v1::VARIANT_MNIST, 1.0, 12},
                      InverseCase{petra::v1::ARCHITECTURE_REVVIT,
                                  petra::v1::VARIANT_CIFAR, 1.0, 12}),
    [](const auto& info) {
      return petra::v1::Architecture_Name(info.param.arch).substr(13) + "_" +
             petra::v1::Variant_Name(info.param.variant).substr(8);
    });

// ceil(log2 P) stride-2 convolutions, doubling up to the embedding, and the
// patchify stem's tokens wherever the validation lets the conv stem run.
TEST(ConvStem, WidthsDoubleUpToTheEmbeddingAndTokensMatchPatchify) {
  EXPECT_EQ(catalog::ConvStemWidths(7, 64), (std::vector<int64_t>{32, 64, 64}));
  EXPECT_EQ(catalog::ConvStemWidths(4, 64), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(catalog::ConvStemWidths(16, 768),
            (std::vector<int64_t>{32, 64, 128, 256}));
  EXPECT_EQ(catalog::ConvStemWidths(2, 8), (std::vector<int64_t>{8}));
  EXPECT_TRUE(catalog::ConvStemWidths(1, 64).empty());
  EXPECT_EQ(catalog::ConvStemWidths(8, 2), (std::vector<int64_t>{2, 2, 2}));
  for (int64_t side : {28, 32, 224}) {
    for (int64_t p = 1; p <= side; ++p) {
      if (side % p != 0) continue;
      // Only patches that are not powers of two can miss: 7 of 224.
      const bool power_of_two = (p & (p - 1)) == 0;
      if (power_of_two) {
        EXPECT_TRUE(catalog::ConvStemFits(side, p)) << side << " " << p;
      }
      if (catalog::ConvStemFits(side, p)) {
        EXPECT_EQ(catalog::ConvStemSide(side, p), side / p);
      }
    }
  }
  EXPECT_TRUE(catalog::ConvStemFits(28, 7));
  EXPECT_TRUE(catalog::ConvStemFits(28, 14));
  EXPECT_FALSE(catalog::ConvStemFits(224, 7));
  EXPECT_EQ(catalog::ConvStemSide(224, 7), 28);
  EXPECT_FALSE(catalog::ConvStemFits(28, 5));  // not a divisor
}

// revvit and vit of the same sizes: stem, depth blocks, head; the same
// parameters per block (F and G); tokens of 28 / 7 squared on both streams
// of revvit, one stream of vit; logits at the end.
TEST(Network, TransformersHaveTheirSizes) {
  torch::manual_seed(1);
  petra::v1::ModelSpec rev_spec =
      Spec(petra::v1::ARCHITECTURE_REVVIT, petra::v1::VARIANT_MNIST, 1.0, 3);
  petra::v1::ModelSpec vit_spec =
      Spec(petra::v1::ARCHITECTURE_VIT, petra::v1::VARIANT_MNIST, 1.0, 3);
  EXPECT_EQ(rev_spec.transformer().embed_dim(), 64u);
  EXPECT_EQ(rev_spec.transformer().heads(), 4u);
  EXPECT_EQ(rev_spec.transformer().patch_size(), 7u);
  absl::StatusOr<Network> rev = BuildNetwork(rev_spec, 0);
  absl::StatusOr<Network> vit = BuildNetwork(vit_spec, 0);
  ASSERT_TRUE(rev.ok()) << rev.status();
  ASSERT_TRUE(vit.ok()) << vit.status();
  ASSERT_EQ(rev->blocks.size(), 5u);
  ASSERT_EQ(vit->blocks.size(), 5u);
  auto count = [](const std::shared_ptr<Block>& b) {
    int64_t n = 0;
    for (const auto& p : b->parameters()) n += p.numel();
    return n;
  };
  // The conv stem (the default): 3x3 stride-2 ConvBn of 32, 64 and 64
  // channels (28 -> 14 -> 7 -> 4), a 1x1 convolution to 64, 16 positions.
  EXPECT_EQ(count(rev->blocks[0]),
            (1 * 32 * 9 + 2 * 32) + (32 * 64 * 9 + 2 * 64) +
                (64 * 64 * 9 + 2 * 64) + (64 * 64 + 64) + 16 * 64);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_TRUE(rev->blocks[i]->reversible());
    EXPECT_FALSE(vit->blocks[i]->reversible());
    EXPECT_EQ(count(rev->blocks[i]), count(vit->blocks[i]));
    // 2 LayerNorms, qkv, proj, fc1, fc2 at D = 64, hidden 128.
    EXPECT_EQ(count(rev->blocks[i]), 2 * 2 * 64 + (64 * 192 + 192) +
                                         (64 * 64 + 64) + (64 * 128 + 128) +
                                         (128 * 64 + 64));
  }
  torch::NoGradGuard no_grad;
  TensorPair x{torch::randn({2, 1, 28, 28}), {}};
  TensorPair y = x;
  for (size_t i = 0; i < 4; ++i) y = rev->blocks[i]->Forward(y);
  EXPECT_EQ(y.a.sizes(), (std::vector<int64_t>{2, 16, 64}));
  EXPECT_EQ(y.b.sizes(), (std::vector<int64_t>{2, 16, 64}));
  EXPECT_EQ(rev->blocks[4]->Forward(y).a.sizes(),
            (std::vector<int64_t>{2, 10}));
  TensorPair z = x;
  for (auto& b : vit->blocks) z = b->Forward(z);
  EXPECT_FALSE(z.is_pair());
  EXPECT_EQ(z.a.sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(Network, ShapesOfRevNet18OnMnist) {
  absl::StatusOr<NetworkBlueprint> net = DescribeNetwork(
      Spec(petra::v1::ARCHITECTURE_REVNET18, petra::v1::VARIANT_MNIST, 0.25));
  ASSERT_TRUE(net.ok());
  std::vector<BlockSummary> blocks = SummarizeBlocks(*net);
  ASSERT_EQ(blocks.size(), 10u);
  EXPECT_EQ(blocks[0].kind, "stem");
  EXPECT_TRUE(blocks[0].output_is_pair);
  EXPECT_THAT(blocks[0].output_shape, ::testing::ElementsAre(16, 28, 28));
  EXPECT_EQ(blocks[1].kind, "reversible");
  EXPECT_EQ(blocks[3].kind, "downsample");
  EXPECT_THAT(blocks[3].output_shape, ::testing::ElementsAre(32, 14, 14));
  EXPECT_THAT(blocks[8].output_shape, ::testing::ElementsAre(128, 4, 4));
  EXPECT_EQ(blocks[9].kind, "head");
  EXPECT_THAT(blocks[9].output_shape, ::testing::ElementsAre(10));
  for (const BlockSummary& b : blocks) EXPECT_GT(b.forward_flops, 0) << b.kind;
  // A reversible block at 28x28 with 16 channels: two 3x3 convs.
  EXPECT_EQ(blocks[1].forward_flops, 2 * (2 * 16 * 9 * 16 * 28 * 28));
}

TEST(Network, SameSeedSameWeights) {
  auto spec =
      Spec(petra::v1::ARCHITECTURE_RESNET18, petra::v1::VARIANT_CIFAR, 0.25);
  auto a = BuildNetwork(spec, 7);
  auto b = BuildNetwork(spec, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  auto pa = a->blocks[1]->parameters();
  auto pb = b->blocks[1]->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

// A stage builds only its blocks: any range of a network has the blocks the
// whole network has there, weights and BN statistics alike, and another
// seed gives other weights.
TEST(Network, ARangeOfBlocksIsTheWholeNetworksSlice) {
  for (auto arch :
       {petra::v1::ARCHITECTURE_REVNET18, petra::v1::ARCHITECTURE_REVVIT}) {
    const petra::v1::ModelSpec spec =
        Spec(arch, petra::v1::VARIANT_MNIST, 0.125, 3);
    absl::StatusOr<Network> whole = BuildNetwork(spec, 11);
    absl::StatusOr<NetworkBlueprint> blueprint = DescribeNetwork(spec);
    ASSERT_TRUE(whole.ok() && blueprint.ok());
    ASSERT_EQ(blueprint->size(), static_cast<int>(whole->blocks.size()));
    for (auto [begin, end] :
         {std::pair{0, 2}, std::pair{2, 4}, std::pair{3, blueprint->size()}}) {
      const std::vector<std::shared_ptr<Block>> part =
          BuildBlocks(*blueprint, begin, end, 11);
      ASSERT_EQ(static_cast<int>(part.size()), end - begin);
      for (int i = begin; i < end; ++i) {
        const auto mine = part[i - begin]->named_parameters();
        const auto theirs = whole->blocks[i]->named_parameters();
        ASSERT_EQ(mine.size(), theirs.size());
        for (const auto& p : theirs) {
          EXPECT_TRUE(torch::equal(mine[p.key()], p.value()))
              << petra::v1::Architecture_Name(arch) << " block " << i << " "
              << p.key();
        }
      }
    }
    // (BatchNorm's and LayerNorm's weights start at 1 whatever the seed.)
    const auto other = BuildBlocks(*blueprint, 1, 2, 12)[0]->parameters();
    const auto same = whole->blocks[1]->parameters();
    bool differs = false;
    for (size_t i = 0; i < other.size(); ++i) {
      differs = differs || !torch::equal(other[i], same[i]);
    }
    EXPECT_TRUE(differs) << petra::v1::Architecture_Name(arch);
  }
}

TEST(Network, StageSummaryGroupsBlocks) {
  auto net = DescribeNetwork(
      Spec(petra::v1::ARCHITECTURE_REVNET18, petra::v1::VARIANT_CIFAR, 0.25));
  ASSERT_TRUE(net.ok());
  std::vector<BlockSummary> blocks = SummarizeBlocks(*net);
  std::vector<StageSummary> stages =
      SummarizeStages(blocks, {{0, 1}, {1, 3}, {3, 10}});
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_FALSE(stages[0].reversible);
  EXPECT_TRUE(stages[1].reversible);  // two reversible blocks
  EXPECT_FALSE(stages[2].reversible);
  EXPECT_EQ(stages[1].parameters, blocks[1].parameters + blocks[2].parameters);
}

TEST(PlanPartition, FollowsTheSpec) {
  auto net = DescribeNetwork(
      Spec(petra::v1::ARCHITECTURE_REVNET18, petra::v1::VARIANT_MNIST, 0.125));
  ASSERT_TRUE(net.ok());
  petra::v1::JobSpec job;
  job.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  job.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  job.mutable_training()->set_micro_batch_size(4);
  job::ApplyJobSpecDefaults(&job);
  EXPECT_EQ(PlanPartition(*net, job)->size(), 10u);  // per block
  for (auto cost : {petra::v1::PartitionSpec::COST_ESTIMATED,
                    petra::v1::PartitionSpec::COST_MEASURED}) {
    job.mutable_partition()->set_stage_count(3);
    job.mutable_partition()->set_cost(cost);
    absl::StatusOr<std::vector<BlockRange>> r = PlanPartition(*net, job);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ(r->front().begin, 0);
    EXPECT_EQ(r->back().end, 10);
  }
  job.mutable_partition()->mutable_splits()->add_split_at(4);
  job.mutable_partition()->mutable_splits()->add_split_at(9);
  absl::StatusOr<std::vector<BlockRange>> split = PlanPartition(*net, job);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), 3u);
  EXPECT_EQ((*split)[0].end, 4);
  EXPECT_EQ((*split)[1].begin, 4);
  EXPECT_EQ((*split)[1].end, 9);
  EXPECT_EQ((*split)[2].end, 10);
  std::vector<double> seconds = MeasureBlockSeconds(*net, 4, 1);
  ASSERT_EQ(seconds.size(), 10u);
  for (double s : seconds) EXPECT_GT(s, 0);
}

}  // namespace
}  // namespace petra::model

// The default split of `--stages N`: balanced by FLOPs and memory-bound
// elements, deterministic (shapes only), and the FLOPs-only split on request.
#include "services/model/partition_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/job/job_spec_validation.h"
#include "services/model/network_summary.h"

namespace petra::model {
namespace {

using ::testing::ElementsAre;

petra::v1::JobSpec MainJob(petra::v1::PartitionSpec::Cost cost) {
  // `petra train`'s embedded default: RevNet18, width 0.25, Fashion-MNIST's
  // 28x28, 2 stages.
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.25);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  s.mutable_partition()->set_stage_count(2);
  s.mutable_partition()->set_cost(cost);
  return *job::ResolveJobSpec(s);
}

std::vector<BlockRange> Plan(const petra::v1::JobSpec& spec) {
  NetworkBlueprint net = *DescribeNetwork(spec.model());
  return *PlanPartition(net, spec);
}

// Measured on 2 cores, [0,4)+[4,10) trains the main job about 12% faster
// than FLOPs' [0,5)+[5,10): the 28x28 blocks cost more than their FLOPs
// say. The estimate gives the measured split, the same every time.
TEST(PlanPartition, TheEstimateWeighsMemoryBoundLayers) {
  const petra::v1::JobSpec estimated =
      MainJob(petra::v1::PartitionSpec::COST_ESTIMATED);
  EXPECT_THAT(Plan(estimated),
              ElementsAre(BlockRange{0, 4}, BlockRange{4, 10}));
  EXPECT_THAT(Plan(estimated),
              ElementsAre(BlockRange{0, 4}, BlockRange{4, 10}));
  EXPECT_THAT(Plan(MainJob(petra::v1::PartitionSpec::COST_FLOPS)),
              ElementsAre(BlockRange{0, 5}, BlockRange{5, 10}));
}

TEST(SummarizeBlocks, CountsMemoryBoundElementsOfEveryKind) {
  petra::v1::JobSpec spec = MainJob(petra::v1::PartitionSpec::COST_ESTIMATED);
  NetworkBlueprint net = *DescribeNetwork(spec.model());
  std::vector<BlockSummary> blocks = SummarizeBlocks(net);
  // The first reversible block at 16x28x28 per stream: R's two BatchNorms
  // and two ReLUs write 4 x 16 x 28 x 28 elements.
  EXPECT_EQ(blocks[1].forward_elementwise, 4 * 16 * 28 * 28);
  EXPECT_DOUBLE_EQ(EstimatedCost(blocks[1]),
                   blocks[1].forward_flops + 250.0 * 4 * 16 * 28 * 28);

  // A transformer block: two LayerNorms, the softmax's scores, the GELU.
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVVIT);
  spec.mutable_model()->set_width(1);
  petra::v1::TransformerSpec* t = spec.mutable_model()->mutable_transformer();
  t->set_embed_dim(16);
  t->set_depth(1);
  t->set_heads(2);
  t->set_mlp_ratio(2);
  t->set_patch_size(7);
  t->set_stem(petra::v1::TransformerSpec::STEM_PATCH);
  NetworkBlueprint vit = *DescribeNetwork(spec.model());
  blocks = SummarizeBlocks(vit);
  const int64_t n = 16, d = 16, heads = 2;
  EXPECT_EQ(blocks[1].forward_elementwise,
            n * d + 2 * heads * n * n + n * d + n * 2 * d);
}

}  // namespace
}  // namespace petra::model

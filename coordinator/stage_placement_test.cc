#include "coordinator/stage_placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/job/job_spec_validation.h"

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

// RevNet18 at width 0.25 in 2 stages under delayed gradients: stage 0
// keeps inputs and weights for more micro-batches than stage 1.
petra::v1::JobSpec Delayed() {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.25);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  s.mutable_training()->set_micro_batch_size(64);
  s.mutable_training()->set_mode(petra::v1::TRAINING_MODE_DELAYED);
  s.mutable_training()->set_stash_inputs(true);
  s.mutable_training()->set_stash_weights(true);
  s.mutable_partition()->set_stage_count(2);
  return *job::ResolveJobSpec(s);
}

TEST(PlaceStages, TheStageThatNeedsMostGetsTheServerThatHasMost) {
  absl::StatusOr<JobBlocks> blocks = DescribeJobBlocks(Delayed());
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  ASSERT_EQ(blocks->ranges.size(), 2u);
  EXPECT_TRUE(blocks->cut_is_free);
  EXPECT_FALSE(blocks->seconds);
  ASSERT_EQ(blocks->cut_bytes.size(), blocks->costs.size() - 1);
  const int64_t first = blocks->stage_bytes(blocks->ranges[0], 0, 2);
  const int64_t second = blocks->stage_bytes(blocks->ranges[1], 1, 2);
  ASSERT_GT(first, second);
  // Listed first: room for stage 1 only.
  const int64_t between = (first + second) / 2;
  std::vector<sim::PlacementServer> servers = {
      {"small:1", "h", between, "its --memory-limit-bytes"},
      {"large:1", "h", first + 1, "its --memory-limit-bytes"}};
  absl::StatusOr<sim::Placement> placed =
      PlaceStages(*blocks, blocks->ranges, false, servers);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->servers, (std::vector<int>{1, 0}));
  EXPECT_EQ(placed->ranges, blocks->ranges);
  // Neither has room for stage 0, and no other cut fits either: refused,
  // with the stage's bytes and what they are made of.
  servers[1].memory_bytes = between;
  placed = PlaceStages(*blocks, blocks->ranges, false, servers);
  ASSERT_EQ(placed.status().code(), absl::StatusCode::kResourceExhausted)
      << placed.status();
  EXPECT_THAT(placed.status().message(),
              HasSubstr("stage 0 (blocks 0-"));
  EXPECT_THAT(placed.status().message(),
              HasSubstr("weights kept for the backward"));
  EXPECT_THAT(placed.status().message(),
              HasSubstr("(its --memory-limit-bytes)"));
}

// A kept cut (a recovery, explicit splits) is never moved.
TEST(PlaceStages, AKeptCutStays) {
  absl::StatusOr<JobBlocks> blocks = DescribeJobBlocks(Delayed());
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  const int n = static_cast<int>(blocks->costs.size());
  const std::vector<model::BlockRange> odd = {{0, 1}, {1, n}};
  absl::StatusOr<sim::Placement> placed = PlaceStages(
      *blocks, odd, true, {{"a:1", "h", 0, ""}, {"b:1", "h", 0, ""}});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->ranges, odd);
  EXPECT_EQ(placed->servers, (std::vector<int>{0, 1}));
}

// With measured times, the bandwidth between hosts (--cross-host-bandwidth)
// moves a cut off a wide activation when crossing it would be the slowest.
TEST(PlaceStages, ANarrowLinkBetweenHostsMovesTheCutOffAWideActivation) {
  JobBlocks blocks;
  blocks.costs = {1, 1, 1, 1};  // seconds
  blocks.seconds = true;
  blocks.cut_bytes = {1, 500000000, 1};  // the balanced cut is the wide one
  blocks.stage_bytes = [](model::BlockRange, int, int) { return 1; };
  blocks.ranges = {{0, 2}, {2, 4}};
  blocks.cut_is_free = true;
  const std::vector<sim::PlacementServer> servers = {{"a:1", "a", 0, ""},
                                                     {"b:1", "b", 0, ""}};
  // 5 GB/s (the default): 0.2 s a backward message, under 2 s of compute.
  absl::StatusOr<sim::Placement> placed =
      PlaceStages(blocks, blocks.ranges, false, servers);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->ranges, blocks.ranges);
  // 100 MB/s: 10 s across the wide cut; a narrow cut costs 3 s of compute.
  placed = PlaceStages(blocks, blocks.ranges, false, servers, 0, 1e8);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->ranges, (std::vector<model::BlockRange>{{0, 1}, {1, 4}}));
  EXPECT_DOUBLE_EQ(placed->bottleneck, 3);
}

}  // namespace
}  // namespace petra::coordinator

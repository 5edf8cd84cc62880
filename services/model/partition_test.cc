#include "services/model/partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::model {
namespace {

using ::testing::ElementsAre;

TEST(Partition, PerBlock) {
  EXPECT_THAT(
      PerBlockPartition(3),
      ElementsAre(BlockRange{0, 1}, BlockRange{1, 2}, BlockRange{2, 3}));
}

TEST(Partition, BalancesTheLargestStage) {
  auto r = BalancedPartition({1, 1, 1, 1, 4}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, ElementsAre(BlockRange{0, 4}, BlockRange{4, 5}));
  r = BalancedPartition({3, 1, 1, 1, 3, 1, 2}, 3);
  ASSERT_TRUE(r.ok());
  // Best max is 4: [3,1] [1,1] ... checks the optimum, not a greedy cut.
  double worst = 0;
  std::vector<double> c = {3, 1, 1, 1, 3, 1, 2};
  for (const BlockRange& g : *r) {
    double sum = 0;
    for (int i = g.begin; i < g.end; ++i) sum += c[i];
    worst = std::max(worst, sum);
  }
  EXPECT_EQ(worst, 5);
  EXPECT_EQ(r->front().begin, 0);
  EXPECT_EQ(r->back().end, 7);
}

TEST(Partition, EveryStageNonEmptyEvenWithZeroCosts) {
  auto r = BalancedPartition({0, 0, 0, 5}, 4);
  ASSERT_TRUE(r.ok());
  for (const BlockRange& g : *r) EXPECT_LT(g.begin, g.end);
}

TEST(Partition, RefusesImpossibleCuts) {
  EXPECT_FALSE(BalancedPartition({1, 2}, 3).ok());
  EXPECT_FALSE(BalancedPartition({1, 2}, 0).ok());
  EXPECT_FALSE(BalancedPartition({1, -2}, 1).ok());
}

}  // namespace
}  // namespace petra::model

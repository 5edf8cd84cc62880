#include "services/model/batch_norm.h"

#include <gtest/gtest.h>

namespace petra::model {
namespace {

TEST(BatchNorm, RunningStatsChangeOnlyWhenAsked) {
  torch::manual_seed(1);
  BatchNorm2d bn(4);
  torch::Tensor x = torch::randn({8, 4, 5, 5}) * 3 + 2;
  torch::Tensor mean0 = bn->running_mean.clone();
  torch::Tensor y = bn->forward(x);  // default: batch stats, no update
  EXPECT_TRUE(torch::equal(bn->running_mean, mean0));
  // Normalised with the batch's statistics.
  EXPECT_NEAR(y.mean().item<double>(), 0.0, 1e-5);
  {
    ScopedBnMode update(BnMode::kBatchStatsUpdateRunning);
    bn->forward(x);
  }
  EXPECT_FALSE(torch::equal(bn->running_mean, mean0));
  torch::Tensor mean1 = bn->running_mean.clone();
  {
    ScopedBnMode eval(BnMode::kRunningStats);
    torch::Tensor e = bn->forward(x);
    // Running stats are far from the batch's: the output is not centred.
    EXPECT_GT(std::abs(e.mean().item<double>()), 0.1);
  }
  EXPECT_TRUE(torch::equal(bn->running_mean, mean1));
  EXPECT_EQ(CurrentBnMode(), BnMode::kBatchStats);
}

}  // namespace
}  // namespace petra::model

#include "services/data/batches.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::data {
namespace {

Dataset Data() { return MakeSynthetic({3, 8, 8}, 4, 100, 10, 1).train; }

TEST(EpochBatches, SameBatchEveryTime) {
  Dataset d = Data();
  BatchOptions o;
  o.batch_size = 16;
  o.crop_padding = 2;
  o.horizontal_flip = true;
  o.seed = 3;
  EpochBatches a(d, o, 0), b(d, o, 0);
  EXPECT_EQ(a.size(), 6);  // 100 / 16, last partial dropped
  for (int64_t i : {0, 5, 2}) {
    Batch x = a.Get(i).value(), y = b.Get(i).value();
    EXPECT_TRUE(torch::equal(x.images, y.images));
    EXPECT_TRUE(torch::equal(x.labels, y.labels));
    EXPECT_THAT(x.images.sizes(), ::testing::ElementsAre(16, 3, 8, 8));
  }
}

TEST(EpochBatches, EpochsShuffleDifferently) {
  Dataset d = Data();
  BatchOptions o;
  o.batch_size = 50;
  EXPECT_FALSE(torch::equal(EpochBatches(d, o, 0).Get(0).value().labels,
                            EpochBatches(d, o, 1).Get(0).value().labels));
}

TEST(EpochBatches, KeepsPartialBatchWhenAsked) {
  Dataset d = Data();
  BatchOptions o;
  o.batch_size = 30;
  o.drop_last = false;
  o.shuffle = false;
  EpochBatches e(d, o, 0);
  ASSERT_EQ(e.size(), 4);
  EXPECT_EQ(e.Get(3).value().labels.size(0), 10);
  EXPECT_TRUE(torch::equal(e.Get(0).value().labels, d.labels.narrow(0, 0, 30)));
}

TEST(EpochBatches, NormalisesWithTheDatasetStatistics) {
  Dataset d = Data();
  BatchOptions o;
  o.batch_size = 100;
  Batch b = EpochBatches(d, o, 0).Get(0).value();
  EXPECT_NEAR(b.images.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(b.images.std().item<double>(), 1.0, 0.05);
}

TEST(EpochBatches, FlipAndCropChangePixelsNotLabels) {
  Dataset d = Data();
  BatchOptions plain;
  plain.batch_size = 20;
  plain.normalize = false;
  BatchOptions aug = plain;
  aug.crop_padding = 2;
  aug.horizontal_flip = true;
  Batch p = EpochBatches(d, plain, 0).Get(0).value();
  Batch a = EpochBatches(d, aug, 0).Get(0).value();
  EXPECT_TRUE(torch::equal(p.labels, a.labels));
  EXPECT_FALSE(torch::equal(p.images, a.images));
}

}  // namespace
}  // namespace petra::data

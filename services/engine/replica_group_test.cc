// The replica groups: c10d's Gloo all-reduce through an in-memory store
// (one process) and through a TCP store (the fleet's rendezvous).
#include "services/engine/replica_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

namespace petra::engine {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Rank r holds (r + 1) everywhere; the mean of 1..R is (R + 1) / 2.
void ExpectMean(std::vector<std::unique_ptr<GradientAverager>>& ranks) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::vector<torch::Tensor>> held(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    held[r] = {torch::full({3, 2}, r + 1.0), torch::full({5}, 2.0 * (r + 1))};
    threads.emplace_back([&, r] { ranks[r]->Average(held[r]); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(
        torch::allclose(held[r][0], torch::full({3, 2}, (n + 1) / 2.0)));
    EXPECT_TRUE(torch::allclose(held[r][1], torch::full({5}, n + 1.0)));
    EXPECT_EQ(ranks[r]->bytes(), (6 + 5) * 4);
    EXPECT_EQ(ranks[r]->rank(), r);
    EXPECT_EQ(ranks[r]->replicas(), n);
  }
}

TEST(ReplicaGroup, AveragesInOneProcess) {
  auto group = MakeLocalReplicaGroup(3, milliseconds(30000));
  ASSERT_TRUE(group.ok()) << group.status();
  ExpectMean(*group);
}

// Agree compares one value across the ranks: every rank learns whether
// all of them passed the same, negative values and the extremes included.
TEST(ReplicaGroup, AgreeTellsEveryRankWhetherTheValuesMatch) {
  auto group = MakeLocalReplicaGroup(3, milliseconds(30000));
  ASSERT_TRUE(group.ok()) << group.status();
  auto agree = [&](std::vector<int64_t> values) {
    std::vector<int> out(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] { out[r] = (*group)[r]->Agree(values[r]); });
    }
    for (std::thread& t : threads) t.join();
    return out;
  };
  const int64_t big = (int64_t{1} << 62) - 1;
  EXPECT_EQ(agree({7, 7, 7}), std::vector<int>({1, 1, 1}));
  EXPECT_EQ(agree({-big, -big, -big}), std::vector<int>({1, 1, 1}));
  EXPECT_EQ(agree({7, 8, 7}), std::vector<int>({0, 0, 0}));
  EXPECT_EQ(agree({big, -big, big}), std::vector<int>({0, 0, 0}));
}

TEST(ReplicaGroup, RanksMeetThroughATcpStore) {
  auto store = ReplicaStore::Start("127.0.0.1", 0, milliseconds(30000));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_GT((*store)->port(), 0);
  std::vector<std::unique_ptr<GradientAverager>> ranks(2);
  std::vector<std::thread> joining;
  for (int r = 0; r < 2; ++r) {
    joining.emplace_back([&, r] {
      auto g = JoinReplicaGroup("127.0.0.1", (*store)->port(), "stage-0", r, 2,
                                "127.0.0.1", milliseconds(30000));
      ASSERT_TRUE(g.ok()) << g.status();
      ranks[r] = std::move(*g);
    });
  }
  for (std::thread& t : joining) t.join();
  ASSERT_TRUE(ranks[0] && ranks[1]);
  ExpectMean(ranks);
}

TEST(ReplicaGroup, BadRanksAndMissingStoresAreRefused) {
  auto bad = JoinReplicaGroup("127.0.0.1", 1234, "stage-0", 2, 2, "127.0.0.1",
                              milliseconds(1000));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("rank 2 of 2"));
  // Nothing listens on a port the store had and gave back.
  int port = 0;
  {
    auto store = ReplicaStore::Start("127.0.0.1", 0, milliseconds(1000));
    ASSERT_TRUE(store.ok());
    port = (*store)->port();
  }
  auto none = JoinReplicaGroup("127.0.0.1", port, "stage-0", 0, 2, "127.0.0.1",
                               milliseconds(1000));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("could not join through 127.0.0.1"));
  EXPECT_EQ(MakeLocalReplicaGroup(0, milliseconds(1000)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace petra::engine

#include "services/sim/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace petra::sim {
namespace {

using ::testing::HasSubstr;
using Ranges = std::vector<model::BlockRange>;

// A stage keeps its blocks' parameters, and its input for each micro-batch
// in flight (stages - stage of them, as a stashing pipeline would).
struct Toy {
  std::vector<int64_t> block_bytes;
  std::vector<int64_t> cut_bytes;
  int64_t input_bytes = 10;
  int64_t Need(model::BlockRange r, int stage, int stages) const {
    int64_t n = 0;
    for (int b = r.begin; b < r.end; ++b) n += block_bytes[b];
    const int64_t in = r.begin == 0 ? input_bytes : cut_bytes[r.begin - 1];
    return n + (stages - stage) * in;
  }
};

PlacementProblem Problem(const Toy& toy, std::vector<double> costs,
                         std::vector<PlacementServer> servers, int stages) {
  PlacementProblem p;
  p.block_costs = std::move(costs);
  p.cut_bytes = toy.cut_bytes;
  p.stage_bytes = [toy](model::BlockRange r, int j, int n) {
    return toy.Need(r, j, n);
  };
  p.servers = std::move(servers);
  p.stages = stages;
  return p;
}

// The brute force the planner is checked against, written apart from it:
// every ordered choice of servers, every cut.
struct Brute {
  double bottleneck = std::numeric_limits<double>::infinity();
  int cross = 0;
};

double Evaluate(const PlacementProblem& p, const Ranges& ranges,
                const std::vector<int>& servers, int* cross) {
  double worst = 0;
  *cross = 0;
  for (size_t j = 0; j < ranges.size(); ++j) {
    const PlacementServer& s = p.servers[servers[j]];
    const int64_t need = p.stage_bytes(ranges[j], static_cast<int>(j),
                                       static_cast<int>(ranges.size()));
    if (s.memory_bytes > 0 && need > s.memory_bytes) return -1;
    double cost = 0;
    for (int b = ranges[j].begin; b < ranges[j].end; ++b)
      cost += p.block_costs[b];
    worst = std::max(worst, cost);
    if (j == 0) continue;
    const bool same = p.servers[servers[j - 1]].host == s.host;
    *cross += same ? 0 : 1;
    if (p.seconds_per_cost > 0) {
      const double bw = same ? p.same_host_bandwidth : p.cross_host_bandwidth;
      worst = std::max(worst, 2.0 * p.cut_bytes[ranges[j].begin - 1] / bw /
                                  p.seconds_per_cost);
    }
  }
  return worst;
}

void Cuts(int blocks, int stages, Ranges& now, std::vector<Ranges>& out) {
  const int begin = now.empty() ? 0 : now.back().end;
  if (static_cast<int>(now.size()) == stages - 1) {
    now.push_back({begin, blocks});
    out.push_back(now);
    now.pop_back();
    return;
  }
  for (int end = begin + 1; end <= blocks - (stages - 1 - (int)now.size());
       ++end) {
    now.push_back({begin, end});
    Cuts(blocks, stages, now, out);
    now.pop_back();
  }
}

void Orders(int servers, int stages, std::vector<int>& now,
            std::vector<std::vector<int>>& out) {
  if (static_cast<int>(now.size()) == stages) {
    out.push_back(now);
    return;
  }
  for (int s = 0; s < servers; ++s) {
    if (std::find(now.begin(), now.end(), s) != now.end()) continue;
    now.push_back(s);
    Orders(servers, stages, now, out);
    now.pop_back();
  }
}

Brute BruteForce(const PlacementProblem& p) {
  std::vector<Ranges> cuts;
  Ranges now;
  Cuts(static_cast<int>(p.block_costs.size()), p.stages, now, cuts);
  std::vector<std::vector<int>> orders;
  std::vector<int> o;
  Orders(static_cast<int>(p.servers.size()), p.stages, o, orders);
  Brute best;
  for (const auto& order : orders) {
    for (const Ranges& r : cuts) {
      int cross = 0;
      const double v = Evaluate(p, r, order, &cross);
      if (v < 0) continue;
      if (v < best.bottleneck - 1e-9 ||
          (v <= best.bottleneck + 1e-9 && cross < best.cross)) {
        best = {std::min(v, best.bottleneck), cross};
      }
    }
  }
  return best;
}

TEST(Placement, MatchesBruteForceOnSmallFleets) {
  std::mt19937 rng(7);
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  int placed = 0, refused = 0, moved = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int blocks = uniform(2, 7);
    const int servers = uniform(1, 5);
    const int stages = uniform(1, std::min(blocks, servers));
    Toy toy;
    std::vector<double> costs;
    for (int b = 0; b < blocks; ++b) {
      costs.push_back(uniform(1, 10));
      toy.block_bytes.push_back(uniform(1, 40));
      if (b + 1 < blocks) toy.cut_bytes.push_back(uniform(1, 30));
    }
    std::vector<PlacementServer> fleet;
    for (int s = 0; s < servers; ++s) {
      fleet.push_back({"s" + std::to_string(s),
                       std::string(1, static_cast<char>('a' + uniform(0, 2))),
                       uniform(0, 4) == 0 ? 0 : uniform(30, 160), "its limit"});
    }
    PlacementProblem p = Problem(toy, costs, fleet, stages);
    if (trial % 2 == 1) {  // links weigh in: costs are seconds
      p.seconds_per_cost = 1;
      p.same_host_bandwidth = 20;
      p.cross_host_bandwidth = 4;
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const Brute want = BruteForce(p);
    absl::StatusOr<Placement> got = PlanPlacement(p);
    if (std::isinf(want.bottleneck)) {
      ASSERT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted)
          << got.status();
      ++refused;
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    ++placed;
    int cross = 0;
    const double v = Evaluate(p, got->ranges, got->servers, &cross);
    ASSERT_GE(v, 0) << "the placement does not fit";
    EXPECT_NEAR(v, want.bottleneck, 1e-9);
    EXPECT_NEAR(got->bottleneck, want.bottleneck, 1e-9);
    EXPECT_EQ(cross, want.cross);
    EXPECT_EQ(got->cross_host_links, want.cross);
    std::vector<int> distinct = got->servers;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int j = 0; j < stages; ++j) {
      EXPECT_EQ(got->stage_bytes[j], toy.Need(got->ranges[j], j, stages));
      moved += got->servers[j] != j;
    }
  }
  // The draw exercised both outcomes, and orders other than the listed one.
  EXPECT_GT(placed, 100);
  EXPECT_GT(refused, 20);
  EXPECT_GT(moved, 50);
}

// Interchangeable servers on one host keep their listed order, and the
// partition every runner computes alone stands when it is as good.
TEST(Placement, KeepsTheListedOrderAndThePreferredCutWhenAllIsEqual) {
  Toy toy{{5, 5, 5, 5}, {1, 1, 1}};
  PlacementProblem p =
      Problem(toy, {1, 3, 1, 3},
              {{"a", "h", 0, ""}, {"b", "h", 0, ""}, {"c", "h", 0, ""}}, 2);
  p.preferred_ranges = {{0, 2}, {2, 4}};
  absl::StatusOr<Placement> got = PlanPlacement(p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->servers, (std::vector<int>{0, 1}));
  EXPECT_EQ(got->ranges, p.preferred_ranges);
  EXPECT_DOUBLE_EQ(got->bottleneck, 4);
  // A preferred cut that is worse is not taken.
  p.preferred_ranges = {{0, 1}, {1, 4}};
  got = PlanPlacement(p);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ranges, (Ranges{{0, 2}, {2, 4}}));
}

// The balanced cut does not fit the small server in front: the planner
// puts the large one first rather than unbalance the cut.
TEST(Placement, PutsTheStageThatNeedsMostOnTheServerThatHasMost) {
  constexpr int64_t MB = 1000000;
  Toy toy{{10 * MB, 10 * MB, 10 * MB, 10 * MB},
          {10 * MB, 10 * MB, 10 * MB},
          10 * MB};
  // Stage 0 of 2 needs 20 + 2 x 10 = 40 MB, stage 1 20 + 10 = 30 MB.
  PlacementProblem p =
      Problem(toy, {1, 1, 1, 1},
              {{"small", "h", 35 * MB, ""}, {"big", "h", 45 * MB, ""}}, 2);
  absl::StatusOr<Placement> got = PlanPlacement(p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->servers, (std::vector<int>{1, 0}));
  EXPECT_EQ(got->ranges, (Ranges{{0, 2}, {2, 4}}));
  EXPECT_EQ(got->stage_bytes, (std::vector<int64_t>{40 * MB, 30 * MB}));
  // Both small: no cut fits (30 + 40, 40 + 30, 50 + 20 MB), and the
  // refusal names the stage, its blocks and both sizes.
  p.servers = {{"s0", "h", 35 * MB, "its --memory-limit-bytes"},
               {"s1", "h", 35 * MB, "its --memory-limit-bytes"}};
  got = PlanPlacement(p);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(got.status().message(),
              HasSubstr("stage 0 (blocks 0-1) needs about 40 MB but the "
                        "largest server, s0, has 35 MB (its "
                        "--memory-limit-bytes)"));
}

// Listed alternating between two hosts, four stages cross hosts once.
TEST(Placement, KeepsStagesOfAHostTogether) {
  Toy toy{{1, 1, 1, 1}, {100, 100, 100}};
  PlacementProblem p = Problem(toy, {1, 1, 1, 1},
                               {{"a0", "a", 0, ""},
                                {"b0", "b", 0, ""},
                                {"a1", "a", 0, ""},
                                {"b1", "b", 0, ""}},
                               4);
  absl::StatusOr<Placement> got = PlanPlacement(p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->cross_host_links, 1);
  EXPECT_EQ(got->servers, (std::vector<int>{0, 2, 1, 3}));
}

// Sixty-four servers on eight hosts, listed host by host in turn: too many
// for every order, the heuristics still keep each host's stages together.
TEST(Placement, ALargeFleetCrossesHostsOncePerHost) {
  Toy toy;
  std::vector<double> costs(128, 1.0);
  toy.block_bytes.assign(128, 1);
  toy.cut_bytes.assign(127, 1000);
  std::vector<PlacementServer> fleet;
  for (int s = 0; s < 64; ++s) {
    fleet.push_back({"s" + std::to_string(s), "host" + std::to_string(s % 8),
                     int64_t{1} << 30, ""});
  }
  PlacementProblem p = Problem(toy, costs, fleet, 64);
  p.seconds_per_cost = 1e-3;
  p.same_host_bandwidth = 1e9;
  p.cross_host_bandwidth = 1e6;  // 2 ms a backward message: the bottleneck
  absl::StatusOr<Placement> got = PlanPlacement(p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->cross_host_links, 7);
  EXPECT_NEAR(got->bottleneck, 2.0, 1e-9);  // in units of 1 ms
}

// The planner's bottleneck is the rate the simulator settles at.
TEST(Placement, PredictsTheSimulatorsSteadyRate) {
  Toy toy{{1, 1, 1, 1, 1, 1}, std::vector<int64_t>(5, 4000000)};
  for (double cross_bandwidth : {1e12, 1e9}) {
    PlacementProblem p = Problem(
        toy, {0.01, 0.02, 0.01, 0.03, 0.01, 0.02},
        {{"a0", "a", 0, ""}, {"a1", "a", 0, ""}, {"b0", "b", 0, ""}}, 3);
    p.seconds_per_cost = 1;
    p.same_host_bandwidth = 1e12;
    p.cross_host_bandwidth = cross_bandwidth;  // 1e9: 8 ms a backward
    absl::StatusOr<Placement> got = PlanPlacement(p);
    ASSERT_TRUE(got.ok()) << got.status();
    SimConfig c = SimConfigFor(p, *got, /*micro_batch_size=*/64, 400);
    c.link_latency = 0;
    absl::StatusOr<SimResult> r = Simulate(c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->steady_samples_per_second, 64 / got->bottleneck,
                0.02 * 64 / got->bottleneck)
        << "cross-host bandwidth " << cross_bandwidth;
  }
}

TEST(Placement, RefusesMalformedProblems) {
  Toy toy{{1, 1}, {1}};
  PlacementProblem p = Problem(toy, {1, 1}, {{"a", "h", 0, ""}}, 2);
  EXPECT_EQ(PlanPlacement(p).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(PlanPlacement(p).status().message(),
              HasSubstr("needs 2 stage servers but only 1 are free"));
  p.stages = 1;
  p.cut_bytes = {};
  EXPECT_THAT(PlanPlacement(p).status().message(),
              HasSubstr("0 cut sizes for 2 blocks"));
  p.cut_bytes = {1};
  p.block_costs = {1, std::nan("")};
  EXPECT_THAT(PlanPlacement(p).status().message(),
              HasSubstr("block 1 costs nan"));
  p.block_costs = {1, 1};
  p.fixed_ranges = {{0, 1}};
  EXPECT_THAT(PlanPlacement(p).status().message(),
              HasSubstr("not 1 consecutive non-empty ranges covering 2"));
}

}  // namespace
}  // namespace petra::sim

namespace petra::sim {
namespace {

// The replicated brute force: every assignment of the R x J slots to
// distinct servers, with one given cut; each stage costs its blocks plus
// its ring all-reduce per micro-batch.
Brute ReplicatedBruteForce(const PlacementProblem& p, const Ranges& ranges) {
  const int R = p.replicas, J = p.stages;
  std::vector<std::vector<int>> assignments;
  std::vector<int> o;
  Orders(static_cast<int>(p.servers.size()), R * J, o, assignments);
  Brute best;
  for (const std::vector<int>& slots : assignments) {
    double worst = 0;
    int cross = 0;
    bool fits = true;
    for (int r = 0; r < R && fits; ++r) {
      int c = 0;
      const double v = Evaluate(
          p, ranges,
          std::vector<int>(slots.begin() + r * J, slots.begin() + (r + 1) * J),
          &c);
      fits = v >= 0;
      worst = std::max(worst, v);
      cross += c;
    }
    if (!fits) continue;
    for (int j = 0; j < J; ++j) {
      bool one_host = true;
      for (int r = 1; r < R; ++r) {
        one_host = one_host &&
                   p.servers[slots[r * J + j]].host == p.servers[slots[j]].host;
      }
      cross += one_host ? 0 : 1;
      double cost = 0, params = 0;
      for (int b = ranges[j].begin; b < ranges[j].end; ++b) {
        cost += p.block_costs[b];
        params += p.block_parameters[b];
      }
      const double bw =
          one_host ? p.same_host_bandwidth : p.cross_host_bandwidth;
      worst = std::max(worst, cost + 2.0 * (R - 1) / R * 4 * params / bw /
                                         p.accumulation / p.seconds_per_cost);
    }
    if (worst < best.bottleneck - 1e-9 ||
        (worst <= best.bottleneck + 1e-9 && cross < best.cross)) {
      best = {std::min(worst, best.bottleneck), cross};
    }
  }
  return best;
}

TEST(ReplicatedPlacement, MatchesBruteForceOnSmallFleets) {
  std::mt19937 rng(11);
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  int placed = 0, refused = 0, split_rings = 0, split_links = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int blocks = uniform(2, 6);
    const int stages = uniform(1, 2);
    const int replicas = uniform(2, 3);
    const int servers = uniform(replicas * stages, 7);
    Toy toy;
    std::vector<double> costs;
    std::vector<int64_t> params;
    for (int b = 0; b < blocks; ++b) {
      costs.push_back(uniform(1, 10));
      toy.block_bytes.push_back(uniform(1, 40));
      params.push_back(uniform(0, 20));
      if (b + 1 < blocks) toy.cut_bytes.push_back(uniform(1, 30));
    }
    std::vector<PlacementServer> fleet;
    for (int s = 0; s < servers; ++s) {
      fleet.push_back({"s" + std::to_string(s),
                       std::string(1, static_cast<char>('a' + uniform(0, 1))),
                       uniform(0, 4) == 0 ? 0 : uniform(40, 160), "its limit"});
    }
    PlacementProblem p = Problem(toy, costs, fleet, stages);
    p.replicas = replicas;
    p.accumulation = uniform(1, 2);
    p.block_parameters = params;
    p.seconds_per_cost = 1;
    p.same_host_bandwidth = 20;
    p.cross_host_bandwidth = 2;
    // One cut, given: the brute force chooses servers only.
    Ranges cuts_now;
    std::vector<Ranges> cuts;
    Cuts(blocks, stages, cuts_now, cuts);
    p.fixed_ranges = cuts[uniform(0, static_cast<int>(cuts.size()) - 1)];
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const Brute want = ReplicatedBruteForce(p, p.fixed_ranges);
    absl::StatusOr<Placement> got = PlanPlacement(p);
    if (std::isinf(want.bottleneck)) {
      ASSERT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted)
          << got.status();
      ++refused;
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    ++placed;
    ASSERT_EQ(got->servers.size(), static_cast<size_t>(replicas * stages));
    EXPECT_NEAR(got->bottleneck, want.bottleneck, 1e-9);
    EXPECT_NEAR(PlacementBottleneck(p, got->ranges, got->servers),
                want.bottleneck, 1e-9);
    EXPECT_EQ(got->cross_host_links + got->cross_host_rings, want.cross);
    std::vector<int> distinct = got->servers;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end());
    split_rings += got->cross_host_rings > 0;
    split_links += got->cross_host_links > 0;
  }
  EXPECT_GT(placed, 100);
  EXPECT_GT(refused, 5);
  EXPECT_GT(split_rings, 10);
  EXPECT_GT(split_links, 10);
}

// Two hosts of two servers, 2 replicas of 2 stages: heavy activations keep
// each pipeline on a host (its rings cross); heavy gradients keep each
// stage's copies on a host (the pipelines cross).
TEST(ReplicatedPlacement, PutsTheHeavierTrafficInsideAHost) {
  std::vector<PlacementServer> fleet = {{"a0", "a", 0, ""},
                                        {"b0", "b", 0, ""},
                                        {"a1", "a", 0, ""},
                                        {"b1", "b", 0, ""}};
  Toy toy{{1, 1}, {1000}, 1};
  PlacementProblem p = Problem(toy, {1, 1}, fleet, 2);
  p.replicas = 2;
  p.seconds_per_cost = 1;
  p.same_host_bandwidth = 1e6;
  p.cross_host_bandwidth = 100;
  p.block_parameters = {1, 1};
  absl::StatusOr<Placement> pipelines = PlanPlacement(p);
  ASSERT_TRUE(pipelines.ok()) << pipelines.status();
  EXPECT_EQ(pipelines->cross_host_links, 0);
  EXPECT_EQ(pipelines->cross_host_rings, 2);
  EXPECT_EQ(p.servers[pipelines->servers[0]].host,
            p.servers[pipelines->servers[1]].host);
  p.cut_bytes = {1};
  p.block_parameters = {100000, 100000};
  absl::StatusOr<Placement> rings = PlanPlacement(p);
  ASSERT_TRUE(rings.ok()) << rings.status();
  EXPECT_EQ(rings->cross_host_rings, 0);
  EXPECT_EQ(rings->cross_host_links, 2);
  EXPECT_EQ(p.servers[rings->servers[0]].host,
            p.servers[rings->servers[2]].host);
  // Too few servers: the refusal counts replicas and stages.
  p.servers.pop_back();
  EXPECT_THAT(PlanPlacement(p).status().message(),
              HasSubstr("needs 4 stage servers (2 replicas x 2 stages) but "
                        "only 3 are free"));
}

}  // namespace
}  // namespace petra::sim

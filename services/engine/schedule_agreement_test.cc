// The simulator and the runtime agree on every schedule: the stage executor
// (RunStageOps, as both runners run it) drives stages whose ops keep a
// virtual clock, the time each message was ready travelling with it; the
// makespan that dataflow gives must be the simulator's for the same costs,
// and each stage's most micro-batches in flight the simulator's too. A
// schedule the runtime orders or waits on differently from the simulator's
// model (an op that waits for another input, a merged loss step costed
// apart, a flush that deadlocks in the runtime's queues) fails here, on any
// machine load: nothing here is timed by a clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_mode_ops.h"
#include "services/engine/stage_pipe_test_support.h"
#include "services/engine/stage_worker_test_support.h"
#include "services/schedule/pipeline_schedule.h"
#include "services/sim/pipeline_sim.h"

namespace petra::engine {
namespace {

// Per stage: a forward's and a backward's cost, in exact binary fractions
// so that sums in any order are equal.
struct VirtualCost {
  double forward = 0;
  double backward = 0;
};

torch::Tensor At(double t) { return torch::full({1}, t, torch::kDouble); }
double When(const torch::Tensor& t) { return t.item<double>(); }

// Ops whose only work is the stage's clock: an op starts when its input
// is there and the stage is free, and what it sends carries its end.
class VirtualClockOps : public StageOps {
 public:
  explicit VirtualClockOps(std::vector<VirtualCost> costs)
      : costs_(std::move(costs)),
        clock_(costs_.size(), 0.0),
        in_flight_(costs_.size(), 0),
        peak_(costs_.size(), 0) {}

  absl::StatusOr<ForwardBatch> Forward(StageWorker& w, ForwardBatch& in,
                                       int64_t) override {
    const int j = w.index();
    Run(j, When(in.x.a), costs_[j].forward);
    peak_[j] = std::max(peak_[j], ++in_flight_[j]);
    return model::ForwardOf(in.id(), {At(clock_[j]), {}});
  }
  absl::StatusOr<LossOutput> Loss(StageWorker& w, ForwardBatch& in,
                                  int64_t) override {
    const int j = w.index();
    Run(j, When(in.x.a), costs_[j].forward + costs_[j].backward);
    peak_[j] = std::max<int64_t>(peak_[j], in_flight_[j] + 1);
    LossOutput out;
    out.backward.input = {At(clock_[j]), {}};
    out.backward.input_grad = out.backward.input;
    return out;
  }
  std::optional<BackwardBatch> LossDown(const StageWorker&, int64_t m,
                                        LossOutput& out) override {
    return model::BackwardOf(m, out.backward.input, out.backward.input_grad);
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker& w, BackwardBatch& in,
                                          int64_t) override {
    const int j = w.index();
    Run(j, When(in.grad.a), costs_[j].backward);
    --in_flight_[j];
    BackwardOutput out;
    out.input = {At(clock_[j]), {}};
    out.input_grad = out.input;
    return out;
  }
  BackwardBatch Down(int64_t m, BackwardBatch&, BackwardOutput& out) override {
    return model::BackwardOf(m, out.input, out.input_grad);
  }

  // Read once every stage's thread has joined.
  double makespan() const {
    return *std::max_element(clock_.begin(), clock_.end());
  }
  int64_t peak_in_flight(int j) const { return peak_[j]; }

 private:
  void Run(int j, double ready, double seconds) {
    clock_[j] = std::max(clock_[j], ready) + seconds;
  }

  const std::vector<VirtualCost> costs_;
  // Each stage's own entries, touched by its thread only.
  std::vector<double> clock_;
  std::vector<int64_t> in_flight_, peak_;
};

// Stage ranges of RevNet18's 10 blocks for J stages (the workers only give
// the executor its positions; their blocks do no work here).
std::vector<model::BlockRange> Ranges(int stages) {
  std::vector<model::BlockRange> ranges;
  for (int j = 0; j + 1 < stages; ++j) ranges.push_back({j, j + 1});
  ranges.push_back({stages - 1, 10});
  return ranges;
}

// The stages' costs: unequal, so that the slowest stage is not the first.
std::vector<VirtualCost> Costs(int stages) {
  const std::vector<VirtualCost> all = {
      {1.0, 2.0}, {1.5, 2.5}, {0.75, 1.75}, {1.25, 3.0}};
  return std::vector<VirtualCost>(all.begin(), all.begin() + stages);
}

struct Case {
  schedule::ScheduleKind kind;
  int stages;
  int64_t micro_batches;
  int64_t group;
};

std::string CaseName(const Case& c) {
  return absl::StrCat(sim::ScheduleName(c.kind), " at J = ", c.stages,
                      ", M = ", c.micro_batches, ", flush ", c.group);
}

void ExpectAgreement(const Case& c) {
  SCOPED_TRACE(CaseName(c));
  std::vector<VirtualCost> costs = Costs(c.stages);
  sim::SimConfig config;
  config.schedule = c.kind;
  config.micro_batches = c.micro_batches;
  config.micro_batch_size = 1;
  config.group = c.group;
  config.link_bandwidth = std::numeric_limits<double>::infinity();
  config.link_latency = 0;
  for (int j = 0; j < c.stages; ++j) {
    sim::StageCost s;
    s.forward_seconds = costs[j].forward;
    s.backward_seconds = costs[j].backward;
    config.stages.push_back(s);
    // The simulator's forward-gradient stage: its forward pushes the
    // tangents too, its update costs nothing; the same costs here.
    if (c.kind == schedule::ScheduleKind::kForwardGradient &&
        j + 1 < c.stages) {
      costs[j].forward *= sim::ForwardGradientForwards(j);
      costs[j].backward = 0;
    }
  }
  absl::StatusOr<sim::SimResult> predicted = sim::Simulate(config);
  ASSERT_TRUE(predicted.ok()) << predicted.status();

  std::vector<std::unique_ptr<StageWorker>> workers = stage_testing::Workers(
      stage_testing::Job(petra::v1::ARCHITECTURE_REVNET18, 1),
      Ranges(c.stages));
  stage_testing::StagePipe pipe(c.stages, [](int64_t id) {
    return model::ForwardOf(id, {At(0), {}});
  });
  VirtualClockOps ops(costs);
  std::vector<std::thread> threads;
  std::mutex mu;
  absl::Status failed;
  for (int j = 0; j < c.stages; ++j) {
    threads.emplace_back([&, j] {
      stage_testing::StagePipe::Ends ends(pipe, j);
      absl::Status s = RunStageOps(*workers[j], ops, c.kind, c.group, ends,
                                   ends, c.micro_batches);
      std::lock_guard<std::mutex> lock(mu);
      if (failed.ok()) failed = s;
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(failed.ok()) << failed;

  EXPECT_DOUBLE_EQ(ops.makespan(), predicted->makespan_seconds);
  ASSERT_EQ(predicted->stages.size(), static_cast<size_t>(c.stages));
  for (int j = 0; j < c.stages; ++j) {
    EXPECT_EQ(ops.peak_in_flight(j), predicted->stages[j].peak_in_flight)
        << "stage " << j;
  }
}

TEST(ScheduleAgreement, RuntimeAndSimulatorAgreeOnEverySchedule) {
  int cases = 0;
  for (sim::Schedule kind : sim::AllSchedules()) {
    for (int stages : {2, 3, 4}) {
      for (int64_t micro_batches : {1, 5, 12}) {
        // A flush of one, one that does not divide M, one of M.
        std::vector<int64_t> groups = {1};
        if (sim::SchedulesInGroups(kind)) {
          groups = {1, std::min<int64_t>(4, micro_batches), micro_batches};
        }
        for (int64_t group : groups) {
          ExpectAgreement({kind, stages, micro_batches, group});
          ++cases;
        }
      }
    }
  }
  // Every kind the simulator models: six, two of them in flushes.
  EXPECT_EQ(cases, 4 * 9 + 2 * 27);
}

// What the check would miss if both sides followed one wrong model: the
// clock itself, on a case worked by hand. GPipe, J = 2, M = 2, one flush;
// stage 0 forwards 1 and backwards 2, stage 1's loss step is 1.5 + 2.5.
// Stage 0: F0 [0,1], F1 [1,2]; stage 1: L0 [1,5], L1 [5,9]; stage 0 then
// backwards oldest first: B0 [5,7], B1 [9,11].
TEST(ScheduleAgreement, GpipeByHand) {
  ExpectAgreement({schedule::ScheduleKind::kGpipe, 2, 2, 2});
  std::vector<std::unique_ptr<StageWorker>> workers = stage_testing::Workers(
      stage_testing::Job(petra::v1::ARCHITECTURE_REVNET18, 1), Ranges(2));
  stage_testing::StagePipe pipe(2, [](int64_t id) {
    return model::ForwardOf(id, {At(0), {}});
  });
  VirtualClockOps ops(Costs(2));
  std::thread up([&] {
    stage_testing::StagePipe::Ends ends(pipe, 1);
    EXPECT_TRUE(RunStageOps(*workers[1], ops, schedule::ScheduleKind::kGpipe, 2,
                            ends, ends, 2)
                    .ok());
  });
  stage_testing::StagePipe::Ends ends(pipe, 0);
  EXPECT_TRUE(RunStageOps(*workers[0], ops, schedule::ScheduleKind::kGpipe, 2,
                          ends, ends, 2)
                  .ok());
  up.join();
  EXPECT_DOUBLE_EQ(ops.makespan(), 11.0);
}

}  // namespace
}  // namespace petra::engine

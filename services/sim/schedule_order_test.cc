#include "services/sim/schedule_order.h"

#include <map>

#include "gtest/gtest.h"
#include "services/engine/pipeline_schedule.h"

namespace petra::sim {
namespace {

constexpr OpKind kF = OpKind::kForward, kB = OpKind::kBackward,
                 kFB = OpKind::kForwardBackward;

TEST(ScheduleOrder, PetraFollowsTheEngineTicks) {
  const int stages = 5;
  const int64_t m = 12;
  for (int j = 0; j < stages - 1; ++j) {
    engine::PipelineSchedule s{j, stages, m};
    std::vector<SimOp> want;
    for (int64_t t = 0; t < s.ticks(); ++t) {
      if (int64_t f = s.ForwardAt(t); f >= 0) {
        want.push_back({static_cast<int32_t>(f), kF});
      }
      if (int64_t b = s.BackwardAt(t); b >= 0) {
        want.push_back({static_cast<int32_t>(b), kB});
      }
    }
    EXPECT_EQ(StageOrder(Schedule::kPetra, j, stages, m, 1), want) << j;
    EXPECT_EQ(StageOrder(Schedule::kDelayed, j, stages, m, 1), want) << j;
  }
  // The last stage has the loss at once: one step per micro-batch.
  const std::vector<SimOp> last =
      StageOrder(Schedule::kPetra, stages - 1, stages, 3, 1);
  EXPECT_EQ(last, (std::vector<SimOp>{{0, kFB}, {1, kFB}, {2, kFB}}));
}

TEST(ScheduleOrder, OneFOneBWarmsUpThenAlternates) {
  EXPECT_EQ(StageOrder(Schedule::kOneFOneB, 0, 3, 4, 4),
            (std::vector<SimOp>{{0, kF},
                                {1, kF},
                                {2, kF},
                                {0, kB},
                                {3, kF},
                                {1, kB},
                                {2, kB},
                                {3, kB}}));
  // A group smaller than the warm-up: all forwards, then all backwards.
  EXPECT_EQ(StageOrder(Schedule::kOneFOneB, 0, 4, 3, 2),
            (std::vector<SimOp>{
                {0, kF}, {1, kF}, {0, kB}, {1, kB}, {2, kF}, {2, kB}}));
}

TEST(ScheduleOrder, GpipeBackwardsNewestFirst) {
  EXPECT_EQ(StageOrder(Schedule::kGpipe, 0, 2, 5, 3),
            (std::vector<SimOp>{{0, kF},
                                {1, kF},
                                {2, kF},
                                {2, kB},
                                {1, kB},
                                {0, kB},
                                {3, kF},
                                {4, kF},
                                {4, kB},
                                {3, kB}}));
  // The last stage runs only the newest forward and backward as one step.
  EXPECT_EQ(StageOrder(Schedule::kGpipe, 1, 2, 2, 2),
            (std::vector<SimOp>{{0, kF}, {1, kFB}, {0, kB}}));
}

TEST(ScheduleOrder, BackpropAlternates) {
  EXPECT_EQ(StageOrder(Schedule::kBackprop, 0, 3, 2, 1),
            (std::vector<SimOp>{{0, kF}, {0, kB}, {1, kF}, {1, kB}}));
}

// Every schedule forwards each micro-batch once and backwards it once,
// after its forward.
TEST(ScheduleOrder, EveryMicroBatchOnceForwardThenBackward) {
  for (Schedule s : AllSchedules()) {
    for (int stages : {1, 2, 7}) {
      for (int j = 0; j < stages; ++j) {
        const int64_t m = 23;
        std::map<int32_t, int> state;  // 1: forwarded, 2: backwarded
        for (const SimOp& op : StageOrder(s, j, stages, m, 5)) {
          int& st = state[op.micro_batch];
          if (op.kind == kFB) {
            EXPECT_EQ(st, 0);
            st = 2;
          } else if (op.kind == kF) {
            EXPECT_EQ(st, 0);
            st = 1;
          } else {
            EXPECT_EQ(st, 1) << ScheduleName(s) << " stage " << j << " mb "
                             << op.micro_batch;
            st = 2;
          }
        }
        EXPECT_EQ(state.size(), static_cast<size_t>(m));
        for (const auto& [mb, st] : state) EXPECT_EQ(st, 2);
      }
    }
  }
}

}  // namespace
}  // namespace petra::sim

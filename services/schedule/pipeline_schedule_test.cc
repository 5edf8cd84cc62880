#include "services/schedule/pipeline_schedule.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace petra::schedule {
namespace {

constexpr OpKind kF = OpKind::kForward, kB = OpKind::kBackward,
                 kFB = OpKind::kForwardBackward;

std::vector<ScheduledOp> Order(ScheduleKind kind, int stage, int stages,
                               int64_t micro_batches, int64_t group = 1) {
  return StageSchedule(kind, stage, stages, micro_batches, group).Rest();
}

// The ops' (micro-batch, kind) only.
std::vector<std::pair<int, OpKind>> Kinds(const std::vector<ScheduledOp>& ops) {
  std::vector<std::pair<int, OpKind>> out;
  for (const ScheduledOp& op : ops) out.emplace_back(op.micro_batch, op.kind);
  return out;
}

TEST(StageSchedule, PetraTicks) {
  const int J = 5;
  const int64_t m = 12;
  for (int j = 0; j < J - 1; ++j) {
    std::vector<ScheduledOp> want;
    for (int64_t t = 0; t < m + 2 * J - 2; ++t) {
      if (t - j >= 0 && t - j < m) {
        want.push_back(
            {static_cast<int32_t>(t - j), kF, static_cast<int32_t>(t)});
      }
      const int64_t b = t - (2 * J - 2 - j);
      if (b >= 0 && b < m) {
        want.push_back({static_cast<int32_t>(b), kB, static_cast<int32_t>(t)});
      }
    }
    EXPECT_EQ(Order(ScheduleKind::kPetra, j, J, m), want) << j;
    EXPECT_EQ(Order(ScheduleKind::kDelayed, j, J, m), want) << j;
  }
  // The last stage has the loss at once: one step per micro-batch, at the
  // tick of its forward.
  EXPECT_EQ(Order(ScheduleKind::kPetra, J - 1, J, 3),
            (std::vector<ScheduledOp>{{0, kFB, 4}, {1, kFB, 5}, {2, kFB, 6}}));
}

// In steady state a micro-batch's backward comes 2(J - 1 - j) ticks after
// its forward.
TEST(StageSchedule, DelayIsTwiceTheDistanceToTheLastStage) {
  const int J = 4;
  for (int j = 0; j < J - 1; ++j) {
    std::map<int, int> forward_tick;
    for (const ScheduledOp& op : Order(ScheduleKind::kPetra, j, J, 20)) {
      if (op.kind == kF) forward_tick[op.micro_batch] = op.tick;
      if (op.kind == kB) {
        EXPECT_EQ(op.tick - forward_tick.at(op.micro_batch), 2 * (J - 1 - j));
      }
    }
  }
}

TEST(StageSchedule, BackpropAlternatesOnTheirOwnTicks) {
  EXPECT_EQ(Order(ScheduleKind::kBackprop, 0, 3, 2),
            (std::vector<ScheduledOp>{
                {0, kF, 0}, {0, kB, 1}, {1, kF, 2}, {1, kB, 3}}));
  EXPECT_EQ(Order(ScheduleKind::kBackprop, 2, 3, 2),
            (std::vector<ScheduledOp>{{0, kFB, 0}, {1, kFB, 2}}));
}

TEST(StageSchedule, OneFOneBWarmsUpThenAlternates) {
  EXPECT_EQ(Kinds(Order(ScheduleKind::kOneFOneB, 0, 3, 4, 4)),
            (std::vector<std::pair<int, OpKind>>{{0, kF},
                                                 {1, kF},
                                                 {2, kF},
                                                 {0, kB},
                                                 {3, kF},
                                                 {1, kB},
                                                 {2, kB},
                                                 {3, kB}}));
  // A group smaller than the warm-up: all forwards, then all backwards.
  EXPECT_EQ(Kinds(Order(ScheduleKind::kOneFOneB, 0, 4, 3, 2)),
            (std::vector<std::pair<int, OpKind>>{
                {0, kF}, {1, kF}, {0, kB}, {1, kB}, {2, kF}, {2, kB}}));
}

TEST(StageSchedule, GpipeBackwardsOldestFirst) {
  EXPECT_EQ(Kinds(Order(ScheduleKind::kGpipe, 0, 2, 5, 3)),
            (std::vector<std::pair<int, OpKind>>{{0, kF},
                                                 {1, kF},
                                                 {2, kF},
                                                 {0, kB},
                                                 {1, kB},
                                                 {2, kB},
                                                 {3, kF},
                                                 {4, kF},
                                                 {3, kB},
                                                 {4, kB}}));
  // The last stage has each loss at once: one step per micro-batch.
  EXPECT_EQ(
      Kinds(Order(ScheduleKind::kGpipe, 1, 2, 3, 2)),
      (std::vector<std::pair<int, OpKind>>{{0, kFB}, {1, kFB}, {2, kFB}}));
}

// Every schedule forwards each micro-batch once and backwards it once,
// after its forward, on every stage.
TEST(StageSchedule, EveryMicroBatchOnceForwardThenBackward) {
  for (ScheduleKind s :
       {ScheduleKind::kBackprop, ScheduleKind::kGpipe, ScheduleKind::kOneFOneB,
        ScheduleKind::kDelayed, ScheduleKind::kPetra}) {
    for (int stages : {1, 2, 7}) {
      for (int j = 0; j < stages; ++j) {
        const int64_t m = 23;
        std::map<int32_t, int> state;  // 1: forwarded, 2: backwarded
        for (const ScheduledOp& op : Order(s, j, stages, m, 5)) {
          int& st = state[op.micro_batch];
          const std::string where = "schedule " +
                                    std::to_string(static_cast<int>(s)) +
                                    " stage " + std::to_string(j);
          if (op.kind == kFB) {
            EXPECT_EQ(st, 0) << where;
            st = 2;
          } else if (op.kind == kF) {
            EXPECT_EQ(st, 0) << where;
            st = 1;
          } else {
            EXPECT_EQ(st, 1) << where << " mb " << op.micro_batch;
            st = 2;
          }
        }
        EXPECT_EQ(state.size(), static_cast<size_t>(m));
        for (const auto& [mb, st] : state) EXPECT_EQ(st, 2);
      }
    }
  }
}

// One op at a time: a pass of 2^30 micro-batches is not built up front.
TEST(StageSchedule, AHugePassCostsNothingUpFront) {
  StageSchedule s(ScheduleKind::kPetra, 0, 2, int64_t{1} << 30);
  EXPECT_EQ(s.Next(), (ScheduledOp{0, kF, 0}));
  EXPECT_EQ(s.Next(), (ScheduledOp{1, kF, 1}));
  EXPECT_EQ(s.Next(), (ScheduledOp{2, kF, 2}));
  EXPECT_EQ(s.Next(), (ScheduledOp{0, kB, 2}));
}

TEST(StageSchedule, ModesMapToTheirSchedules) {
  EXPECT_EQ(ScheduleForMode(petra::v1::TRAINING_MODE_BACKPROP),
            ScheduleKind::kBackprop);
  EXPECT_EQ(ScheduleForMode(petra::v1::TRAINING_MODE_PETRA),
            ScheduleKind::kPetra);
  EXPECT_EQ(ScheduleForMode(petra::v1::TRAINING_MODE_DELAYED),
            ScheduleKind::kDelayed);
}

}  // namespace
}  // namespace petra::schedule

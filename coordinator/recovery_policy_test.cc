#include "coordinator/recovery_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "services/base/timestamp.h"

namespace petra::coordinator {
namespace {

using std::chrono::seconds;

const absl::Status kLost = absl::UnavailableError("stage 1 is unreachable");

TEST(RecoveryPolicy, OnlyARunningJobThatLostAStageRecovers) {
  RecoveryPolicy p(seconds(120), 3);
  EXPECT_EQ(p.wait(false), seconds(0));
  EXPECT_EQ(p.wait(true), seconds(120));
  bool asked = false;
  auto lost = [&] {
    asked = true;
    return true;
  };
  // A job that never ran fails at once: its fleet is likely misnamed.
  EXPECT_EQ(p.Decide(kLost, false, lost), kLost);
  EXPECT_FALSE(asked);
  EXPECT_TRUE(p.Decide(kLost, true, lost).ok());
  EXPECT_TRUE(asked);
  // The job's own failure is not a lost stage.
  const absl::Status diverged = absl::FailedPreconditionError("loss is NaN");
  EXPECT_EQ(p.Decide(diverged, true, [] { return false; }), diverged);
  // --recovery-timeout 0 never recovers.
  RecoveryPolicy never(seconds(0), 3);
  EXPECT_EQ(never.Decide(kLost, true, lost), kLost);
}

TEST(RecoveryPolicy, GivesUpAfterMaxRecoveriesInARowWithoutAnEpoch) {
  RecoveryPolicy p(seconds(10), 2);
  auto lost = [] { return true; };
  EXPECT_TRUE(p.Decide(kLost, true, lost).ok());
  EXPECT_TRUE(p.Decide(kLost, true, lost).ok());
  absl::Status third = p.Decide(kLost, true, lost);
  EXPECT_EQ(third.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(third.message()),
              ::testing::HasSubstr("gave up after 2 recoveries in a row"));
  EXPECT_THAT(std::string(third.message()),
              ::testing::HasSubstr("stage 1 is unreachable"));
  // A finished epoch starts the count again.
  RecoveryPolicy q(seconds(10), 1);
  EXPECT_TRUE(q.Decide(kLost, true, lost).ok());
  q.EpochFinished();
  EXPECT_TRUE(q.Decide(kLost, true, lost).ok());
  EXPECT_FALSE(q.Decide(kLost, true, lost).ok());
}

TEST(RecoveryPolicy, RecordsWhyWhenAndHowLong) {
  petra::v1::Job job;
  job.set_id("job-1");
  job.set_state(petra::v1::JOB_STATE_RUNNING);
  JobRecord record(job, "");
  RecoveryPolicy p(seconds(10), 2);
  // (protobuf's own TimeUtil::GetCurrentTime keeps whole seconds.)
  const google::protobuf::Timestamp before = base::NowTimestamp();
  p.Begin(record, nullptr, "job-1", kLost);
  const google::protobuf::Timestamp after = base::NowTimestamp();
  petra::v1::Job now = record.Snapshot();
  EXPECT_EQ(now.state(), petra::v1::JOB_STATE_RECOVERING);
  ASSERT_EQ(now.recoveries_size(), 1);
  EXPECT_EQ(now.recoveries(0).reason(), "stage 1 is unreachable");
  // When: the moment it was noticed, on the wall clock.
  EXPECT_GE(now.recoveries(0).time(), before);
  EXPECT_LE(now.recoveries(0).time(), after);
  EXPECT_EQ(now.recoveries(0).seconds(), 0);  // still recovering
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  p.End(record, "job-1", 4);
  now = record.Snapshot();
  EXPECT_EQ(now.recoveries(0).restored_epoch(), 4u);
  // How long: from Begin to End.
  EXPECT_GE(now.recoveries(0).seconds(), 0.05);
  EXPECT_LT(now.recoveries(0).seconds(), 30);
}

}  // namespace
}  // namespace petra::coordinator

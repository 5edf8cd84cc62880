#include "coordinator/train_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/base/paths.h"

namespace petra::coordinator {
namespace {

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TrainLog, AppendsInIdOrderAndTrimsEpochsToTrainAgain) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("petra-train-log-", ::getpid());
  petra::base::RemoveTree(dir).IgnoreError();
  std::filesystem::create_directories(dir);
  TrainLog log(dir / "train_log.csv");
  // k = 2: micro-batches 0 and 1 count towards the first step of the epoch.
  ASSERT_TRUE(log.Append(1, 0, 2, {{1, 0.5}, {0, 0.25}, {2, 0.125}}).ok());
  ASSERT_TRUE(log.Append(2, 1, 2, {{0, 1.0 / 3}}).ok());
  EXPECT_EQ(Read(dir / "train_log.csv"),
            "epoch,micro_batch,step,loss\n1,0,0,0.25\n1,1,0,0.5\n1,2,1,0.125\n"
            "2,0,1,0.333333333\n");
  ASSERT_TRUE(log.Trim(1).ok());
  EXPECT_EQ(
      Read(dir / "train_log.csv"),
      "epoch,micro_batch,step,loss\n1,0,0,0.25\n1,1,0,0.5\n1,2,1,0.125\n");
  ASSERT_TRUE(log.Trim(0).ok());
  EXPECT_EQ(Read(dir / "train_log.csv"), "epoch,micro_batch,step,loss\n");
  // No log yet: nothing to trim.
  EXPECT_TRUE(TrainLog(dir / "none.csv").Trim(0).ok());
  // A log that cannot be written says so.
  EXPECT_EQ(
      TrainLog(dir / "missing" / "x.csv").Append(1, 0, 1, {{0, 1}}).code(),
      absl::StatusCode::kInternal);
  petra::base::RemoveTree(dir).IgnoreError();
}

// Found by the chaos campaign: a full disk failed the job with "cannot
// write .../train_log.csv" and no cause. /dev/full fails every write as a
// full disk does.
TEST(TrainLog, AFullDiskIsNamedAsTheCause) {
  absl::Status s = TrainLog("/dev/full").Append(1, 0, 1, {{0, 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("No space left on device"));
}

}  // namespace
}  // namespace petra::coordinator

// Jobs that do not fit a stage's memory: refused before they start where the
// estimate can tell, with both numbers and what to change; an allocation
// that fails mid-job ends the job with one line naming the stage, never a
// stack trace, and the servers stay.
#include <signal.h>

#include <fstream>
#include <iostream>

#include "tests/integration/fleet_fixture.h"

namespace petra::testing {
namespace {

class Memory : public FleetProcesses {};

// A stage server that may use 100 MB is given RevNet18 at width 1 with
// micro-batches of 1024 28x28 images: far beyond it.
TEST_F(Memory, AJobThatCannotFitIsRefusedWithBothNumbers) {
  StartStages(2, {"--memory-limit-bytes", "100000000"});
  StartCoordinator(0);
  const std::string id =
      Submit({"--arch", "revnet18", "--width", "1", "--dataset", "synthetic",
              "--stages", "2", "--micro-batch", "1024", "--epochs", "1"});
  ASSERT_TRUE(WaitForStatus(id, "JOB_STATE_FAILED", std::chrono::seconds(120)))
      << StatusJson(id);
  const petra::v1::Job job = GetJob(id);
  const std::string& reason = job.error().message();
  EXPECT_THAT(reason, HasSubstr("needs about"));
  EXPECT_THAT(
      reason,
      HasSubstr("but this server has 100 MB (its --memory-limit-bytes)"));
  EXPECT_THAT(reason, HasSubstr("lower --micro-batch"));
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  // The servers are idle and take a job that fits.
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(StageStatus(j).state(), petra::v1::StageStatus::STATE_IDLE);
  }
  const std::string small = Submit(SmallJob(1));
  EXPECT_TRUE(
      WaitForStatus(small, "JOB_STATE_SUCCEEDED", std::chrono::seconds(240)))
      << StatusJson(small);
}

// The stage servers run under an address-space limit a little above what
// they use idle, and are told (--memory-limit-bytes) they have far more:
// the job starts, and its first big allocation fails on a stage.
TEST_F(Memory, AnAllocationThatFailsMidJobEndsItInOneLine) {
  // What an idle server takes (libtorch maps a lot), then 1.5 GB more.
  Subprocess probe(kStage, {"--listen", Loopback(0), "--metrics-listen", "",
                            "--state-dir", dir_.path() + "/probe"});
  ASSERT_GT(NumberAfter(probe.WaitForLine("listening on port"), "port "), 0);
  std::ifstream status("/proc/" + std::to_string(probe.pid()) + "/status");
  int64_t vm_kb = 0;
  for (std::string key; status >> key;) {
    if (key == "VmSize:") {
      status >> vm_kb;
      break;
    }
  }
  probe.SignalAndWait(SIGTERM, std::chrono::seconds(30));
  ASSERT_GT(vm_kb, 0);
  const int64_t limit = vm_kb * 1024 + (int64_t{3} << 29);
  StartStages(2, {"--memory-limit-bytes", "1000000000000000"},
              {"/usr/bin/prlimit", "--as=" + std::to_string(limit), "--"});
  StartCoordinator(0);
  // A micro-batch of 4096 at width 1: gigabytes of activations.
  const std::string id =
      Submit({"--arch", "revnet18", "--width", "1", "--dataset", "synthetic",
              "--stages", "2", "--micro-batch", "4096", "--epochs", "1",
              "--test-limit", "64"});
  ASSERT_TRUE(WaitForStatus(id, "JOB_STATE_FAILED", std::chrono::seconds(240)))
      << StatusJson(id);
  const std::string reason = GetJob(id).error().message();
  std::cout << "mid-job allocation failure: " << reason << std::endl;
  EXPECT_THAT(reason, ::testing::MatchesRegex(
                          "stage [01]: forward: out of memory allocating "
                          "[0-9.]+ GB; lower --micro-batch.*"));
  EXPECT_THAT(reason, HasSubstr("lower --micro-batch"));
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  EXPECT_LT(reason.size(), 400u) << reason;
  // Both servers are still there, and answer.
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(kill(stages_[j]->pid(), 0), 0) << stages_[j]->err();
    EXPECT_NE(StageStatus(j).state(),
              petra::v1::StageStatus::STATE_UNSPECIFIED);
  }
}

}  // namespace
}  // namespace petra::testing

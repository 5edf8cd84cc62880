// Crash recovery with real processes: a stage server or the coordinator is
// killed (SIGKILL) mid-job; the job notices, recovers from its newest
// checkpoint and finishes with the accuracy of an uninterrupted run.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "absl/strings/match.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/probes.h"

namespace petra::testing {
namespace {

// Real Fashion-MNIST, small enough for about a second per epoch (16
// micro-batches; test accuracy near 60% after the first); checkpoints after
// every epoch (the default).
std::vector<std::string> MnistJob(int epochs) {
  return {"--arch",        "revnet18",
          "--width",       "0.125",
          "--dataset",     "fashion-mnist",
          "--train-limit", "1024",
          "--test-limit",  "500",
          "--stages",      "2",
          "--epochs",      std::to_string(epochs),
          "--seed",        "5"};
}

class Recovery : public FleetProcesses {
 protected:
  // Runs `job` to the end without faults; returns its final test accuracy.
  double Uninterrupted(const std::vector<std::string>& job) {
    const std::string id = Submit(job);
    const petra::v1::Job done = WaitForState(id, petra::v1::JOB_STATE_SUCCEEDED,
                                             std::chrono::seconds(300));
    EXPECT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED)
        << done.DebugString() << coordinator_->out() << coordinator_->err();
    EXPECT_GT(done.progress().test_accuracy(), 0.3);
    return done.progress().test_accuracy();
  }

  // Kills stage server j and waits up to `timeout` for the job to end.
  petra::v1::Job KillStageAndWaitForTheEnd(int j, const std::string& id,
                                           std::chrono::seconds timeout) {
    stages_[j]->SignalAndWait(SIGKILL, std::chrono::seconds(10));
    return WaitForTheEnd(id, timeout);
  }

  // Job `id`'s training log equals job `baseline`'s, row for row (a
  // recovery trained on as if never interrupted).
  void ExpectSameLosses(const std::string& baseline, const std::string& id) {
    const auto a = Losses(baseline);
    const auto b = Losses(id);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 30u);
    for (const auto& [key, loss] : a) {
      ASSERT_TRUE(b.count(key))
          << "epoch " << key.first << " micro-batch " << key.second;
      EXPECT_NEAR(b.at(key), loss, 1e-5 * std::max(1.0, std::abs(loss)))
          << "epoch " << key.first << " micro-batch " << key.second;
    }
  }

  // Port of stage j's address.
  int Port(int j) {
    const std::string& a = stage_addresses_[j];
    return std::stoi(a.substr(a.rfind(':') + 1));
  }
};

TEST_F(Recovery,
       AStageKilledMidJobIsRestoredAndTheJobFinishesAsIfUninterrupted) {
  StartStages(2);
  StartCoordinator(/*recovery_timeout=*/120);
  const double baseline = Uninterrupted(MnistJob(3));

  const std::string id = Submit(MnistJob(3));
  WaitUntilTrainingAfter(id, 1);
  const int port = Port(1);
  const pid_t killed_pid = stages_[1]->pid();
  ASSERT_EQ(stages_[1]->SignalAndWait(SIGKILL, std::chrono::seconds(10)), -1);
  const auto killed = Clock::now();
  // The coordinator notices within 5 s.
  const petra::v1::Job recovering = WaitForState(
      id, petra::v1::JOB_STATE_RECOVERING, std::chrono::seconds(10));
  const double noticed =
      std::chrono::duration<double>(Clock::now() - killed).count();
  ASSERT_EQ(recovering.state(), petra::v1::JOB_STATE_RECOVERING)
      << recovering.DebugString();
  EXPECT_LT(noticed, 5.0);
  ASSERT_EQ(recovering.recoveries_size(), 1);
  EXPECT_THAT(recovering.recoveries(0).reason(), HasSubstr("127.0.0.1:"));

  // The server comes back on its address with an empty disk (a new pod).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  StartStage(1, port);
  const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);
  EXPECT_GT(done.recoveries(0).seconds(), 0);
  // Restored from the epoch-1 checkpoint and trained on in the same order:
  // the same accuracy (the issue asks for within 1 point).
  EXPECT_NEAR(done.progress().test_accuracy(), baseline, 0.01);
  // For docs/RELIABILITY.md.
  std::cout << "stage killed: noticed in " << noticed << " s, recovered in "
            << done.recoveries(0).seconds() << " s, test accuracy "
            << done.progress().test_accuracy() << " (uninterrupted " << baseline
            << ")" << std::endl;
  EXPECT_THAT(coordinator_->WaitForLine("recovered in"),
              HasSubstr("from epoch 1"));
  // The training log has each epoch once.
  std::ifstream log(dir_.path() + "/coordinator/jobs/" + id + "/train_log.csv");
  std::string line;
  std::map<std::string, int> rows;
  while (std::getline(log, line)) ++rows[line.substr(0, line.find(','))];
  EXPECT_EQ(rows["1"], rows["2"]);
  EXPECT_EQ(rows["2"], rows["3"]);
  EXPECT_GT(rows["1"], 0);
  // The links were shared memory (auto, one host), and the stage died
  // holding rings: none is left.
  EXPECT_EQ(done.stages(0).transport_to_next(), petra::v1::TRANSPORT_SHM);
  ExpectNoRingsLeft({killed_pid});
}

// AdamW's state (both moments and its step count) travels in the
// checkpoints: a stage killed mid-job comes back from epoch 1's and the
// job trains on with the losses of a run never interrupted, row for row.
TEST_F(Recovery, AnAdamWStageKilledMidJobTrainsOnWithTheSameLosses) {
  StartStages(2);
  StartCoordinator(/*recovery_timeout=*/120);
  // A small RevViT, which trains with AdamW by default (recipe transformer).
  const std::vector<std::string> job = {"--arch",        "revvit",
                                        "--embed-dim",   "16",
                                        "--depth",       "2",
                                        "--heads",       "2",
                                        "--dataset",     "fashion-mnist",
                                        "--train-limit", "1024",
                                        "--test-limit",  "256",
                                        "--stages",      "2",
                                        "--epochs",      "3",
                                        "--seed",        "7"};
  const std::string baseline = Submit(job);
  ASSERT_EQ(WaitForState(baseline, petra::v1::JOB_STATE_SUCCEEDED,
                         std::chrono::seconds(300))
                .state(),
            petra::v1::JOB_STATE_SUCCEEDED);
  const std::string id = Submit(job);
  WaitUntilTrainingAfter(id, 1);
  const int port = Port(1);
  ASSERT_EQ(stages_[1]->SignalAndWait(SIGKILL, std::chrono::seconds(10)), -1);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  StartStage(1, port);
  const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);

  ExpectSameLosses(baseline, id);
  EXPECT_NEAR(done.progress().test_accuracy(),
              GetJob(baseline).progress().test_accuracy(), 1e-6);
}

TEST_F(Recovery, ALostStageMovesToAnIdleSpare) {
  StartStages(3);  // the job uses two; the third is a spare
  StartCoordinator(/*recovery_timeout=*/60);
  // Over the bulk gRPC channel: the stage dies with frames in flight both
  // ways, and the new link to the spare opens its own.
  std::vector<std::string> job = SmallJob(3);
  job.insert(job.end(), {"--transport", "grpc_bulk"});
  const std::string id = Submit(job);
  WaitUntilTrainingAfter(id, 1);
  const std::string lost = stage_addresses_[1];
  const petra::v1::Job done =
      KillStageAndWaitForTheEnd(1, id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.stages_size(), 2);
  EXPECT_EQ(done.stages(0).address(), stage_addresses_[0]);
  EXPECT_EQ(done.stages(1).address(), stage_addresses_[2]);
  EXPECT_EQ(done.stages(0).transport_to_next(), petra::v1::TRANSPORT_GRPC_BULK);
  ExpectNoRingsLeft();  // and no bulk payload is left in the inbox
  // The job names no device: each stage runs on its server's own (--device,
  // "cpu" here), and the placement says so.
  EXPECT_EQ(done.stages(0).device(), "cpu");
  EXPECT_EQ(done.stages(1).device(), "cpu");
  EXPECT_THAT(done.recoveries(0).reason(), HasSubstr(lost));
}

// Replicas: a stage server of replica 1 is killed mid-job. Its copy in
// replica 0 sees its all-reduce fail; the job recovers from replica 0's
// checkpoint onto the spare, every replica restores that file, and the job
// trains on with the losses of a run never interrupted, row for row.
TEST_F(Recovery, AReplicaThatLosesAStageRecoversWithTheSameLosses) {
  StartStages(5);  // 2 replicas x 2 stages, and a spare
  StartCoordinator(/*recovery_timeout=*/60);
  std::vector<std::string> job = MnistJob(3);
  job.insert(job.end(), {"--replicas", "2"});
  const std::string baseline = Submit(job);
  const petra::v1::Job first = WaitForState(
      baseline, petra::v1::JOB_STATE_SUCCEEDED, std::chrono::seconds(300));
  ASSERT_EQ(first.state(), petra::v1::JOB_STATE_SUCCEEDED)
      << first.DebugString() << coordinator_->err();
  ASSERT_EQ(first.stages_size(), 4);

  const std::string id = Submit(job);
  WaitUntilTrainingAfter(id, 1);
  // Replica 1's stage 1.
  int victim = -1;
  const petra::v1::Job running = GetJob(id);  // named: it outlives the loop
  for (const petra::v1::StagePlacement& p : running.stages()) {
    if (p.replica() != 1 || p.stage_index() != 1) continue;
    for (size_t i = 0; i < stage_addresses_.size(); ++i) {
      if (stage_addresses_[i] == p.address()) victim = static_cast<int>(i);
    }
  }
  ASSERT_GE(victim, 0);
  const std::string lost = stage_addresses_[victim];
  const petra::v1::Job done =
      KillStageAndWaitForTheEnd(victim, id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED)
      << done.DebugString() << coordinator_->err();
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);
  EXPECT_THAT(done.recoveries(0).reason(), HasSubstr("replica 1"));
  for (const petra::v1::StagePlacement& p : done.stages()) {
    EXPECT_NE(p.address(), lost);
  }
  ExpectSameLosses(baseline, id);
  EXPECT_NEAR(done.progress().test_accuracy(), first.progress().test_accuracy(),
              1e-6);
}

TEST_F(Recovery, ARestartedCoordinatorResumesItsJobPastADamagedCheckpoint) {
  StartStages(2);
  StartCoordinator();
  const double baseline = Uninterrupted(MnistJob(4));

  const std::string id = Submit(MnistJob(4));
  const std::string queued = Submit(SmallJob(1));
  WaitUntilTrainingAfter(id, 2);
  // The coordinator dies without releasing anything.
  coordinator_->SignalAndWait(SIGKILL, std::chrono::seconds(10));
  EXPECT_EQ(StageStatus(0).job_id(), id);
  // Damage the newest checkpoint: the recovery must say so and use epoch 1.
  const std::string jobs = dir_.path() + "/coordinator/jobs/";
  {
    std::fstream f(jobs + id + "/checkpoints/epoch-2/stage-1.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f);
    f.seekp(300);
    f.put('\x5a');
  }
  StartCoordinator();  // same --state-dir
  EXPECT_THAT(coordinator_->WaitForLine("passed over a checkpoint"),
              HasSubstr("epoch-2: stage-1.pt does not match its SHA-256"));
  EXPECT_THAT(coordinator_->WaitForLine("resumed from"),
              HasSubstr("epoch-1 (epoch 1, "));
  const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_THAT(done.recoveries(0).reason(),
              HasSubstr("the coordinator stopped while the job was running"));
  EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);
  EXPECT_NEAR(done.progress().test_accuracy(), baseline, 0.01);
  std::cout << "coordinator killed: recovered in "
            << done.recoveries(0).seconds() << " s, test accuracy "
            << done.progress().test_accuracy() << " (uninterrupted " << baseline
            << ")" << std::endl;
  // The job queued behind it was kept and runs next.
  EXPECT_EQ(WaitForState(queued, petra::v1::JOB_STATE_SUCCEEDED,
                         std::chrono::seconds(120))
                .state(),
            petra::v1::JOB_STATE_SUCCEEDED);
}

TEST_F(Recovery, AGracefulCoordinatorStopLeavesTheJobResumable) {
  StartStages(2);
  StartCoordinator();
  const std::string id = Submit(SmallJob(3));
  WaitUntilTrainingAfter(id, 1);
  ASSERT_EQ(coordinator_->SignalAndWait(SIGTERM, std::chrono::seconds(30)), 0);
  // It let go of the stages rather than cancel the job.
  EXPECT_EQ(StageStatus(0).state(), petra::v1::StageStatus::STATE_IDLE);
  ASSERT_NO_FATAL_FAILURE(
      StartCoordinator(5, {"--metrics-listen", "127.0.0.1:0"}));
  // The coordinator that takes the job over counts its recovery.
  const int metrics_port = NumberAfter(
      coordinator_->WaitForLine("metrics on port"), "metrics on port ");
  EXPECT_THAT(HttpGet(metrics_port, "/metrics"),
              ::testing::ContainsRegex("\npetra_job_recoveries_total 1\n"));
  const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_THAT(done.recoveries(0).reason(), HasSubstr("coordinator stopped"));
  EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);
}

// A `petra watch` that dies mid-job left its stream unfinished, and the
// coordinator's graceful stop then waited for it forever (found by the soak).
TEST_F(Recovery, AVanishedWatchClientDoesNotHoldUpAGracefulStop) {
  StartStages(2);
  StartCoordinator();
  const std::string id = Submit(SmallJob(3));
  Subprocess watch(kPetra, {"watch", "--coordinator", address_, id});
  WaitUntilTrainingAfter(id, 1);
  ASSERT_EQ(watch.SignalAndWait(SIGKILL, std::chrono::seconds(10)), -1);
  EXPECT_EQ(coordinator_->SignalAndWait(SIGTERM, std::chrono::seconds(30)), 0)
      << coordinator_->err();
}

TEST_F(Recovery, NoRecoveriesAllowedFailsTheJobAtOnce) {
  StartStages(2);
  StartCoordinator(/*recovery_timeout=*/60, {"--max-recoveries", "0"});
  const std::string id = Submit(SmallJob(3));
  WaitUntilTrainingAfter(id, 1);
  const petra::v1::Job done =
      KillStageAndWaitForTheEnd(1, id, std::chrono::seconds(30));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_FAILED) << done.DebugString();
  EXPECT_THAT(done.error().message(),
              HasSubstr("gave up after 0 recoveries in a row without "
                        "finishing an epoch (--max-recoveries)"));
  EXPECT_EQ(done.recoveries_size(), 0);
}

TEST_F(Recovery, AStageThatNeverComesBackFailsTheJobAfterTheTimeout) {
  StartStages(2);
  StartCoordinator(/*recovery_timeout=*/2);
  const std::string id = Submit(SmallJob(3));
  WaitUntilTrainingAfter(id, 1);
  const std::string lost = stage_addresses_[1];
  const petra::v1::Job done =
      KillStageAndWaitForTheEnd(1, id, std::chrono::seconds(60));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_FAILED) << done.DebugString();
  EXPECT_THAT(done.error().message(), HasSubstr("within 2 s"));
  EXPECT_THAT(done.error().message(), HasSubstr(lost));
  // The surviving server was released: a one-stage job runs on it.
  std::vector<std::string> one = SmallJob(1);
  one[7] = "1";  // --stages 1
  const std::string next = Submit(one);
  EXPECT_EQ(WaitForState(next, petra::v1::JOB_STATE_SUCCEEDED,
                         std::chrono::seconds(120))
                .state(),
            petra::v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace petra::testing

// The fleet as separate processes, started the way a user starts them: stage
// servers and a coordinator on loopback ephemeral ports, driven by the
// `petra` client (submit, status, watch, list, cancel, export). Raw
// StageService streams against a server: stage_streams_test.cc.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "petra/v1/coordinator.grpc.pb.h"
#include "petra/v1/stage.grpc.pb.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/probes.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/test_messages.h"

namespace petra::testing {
namespace {

TEST_F(FleetProcesses, JobsQueueReuseTheStagesAndExport) {
  StartStages(2);
  StartCoordinator();
  const std::string first = Submit(SmallJob(2));
  const std::string second = Submit(SmallJob(1));
  // The fleet is busy with the first job: the second waits its turn.
  EXPECT_THAT(StatusJson(second), HasSubstr("JOB_STATE_QUEUED"));

  RunResult watch = Petra({"watch", second});
  ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  EXPECT_THAT(watch.out, HasSubstr("succeeded"));
  EXPECT_THAT(watch.out, HasSubstr("epoch 1/1: train loss"));
  EXPECT_THAT(watch.out, HasSubstr("staleness"));  // the stage table

  // Both ran to the end on the same two servers.
  const std::string a = StatusJson(first), b = StatusJson(second);
  EXPECT_THAT(a, HasSubstr("JOB_STATE_SUCCEEDED"));
  EXPECT_THAT(b, HasSubstr("JOB_STATE_SUCCEEDED"));
  for (const std::string& address : stage_addresses_) {
    EXPECT_THAT(a, HasSubstr(address));
    EXPECT_THAT(b, HasSubstr(address));
  }
  EXPECT_THAT(a, HasSubstr("\"test_accuracy\""));
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(StageStatus(j).state(), petra::v1::StageStatus::STATE_IDLE);
  }
  // The coordinator kept a job record and a checkpoint of every stage.
  const std::string jobs = dir_.path() + "/coordinator/jobs/" + first;
  EXPECT_TRUE(std::filesystem::exists(jobs + "/job.json"));
  // The record names fields as `status --json` does (it was camelCase).
  std::string record;
  {
    std::ifstream in(jobs + "/job.json");
    record.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_THAT(record, HasSubstr("\"test_accuracy\""));
  EXPECT_THAT(record, ::testing::Not(HasSubstr("testAccuracy")));
  EXPECT_TRUE(
      std::filesystem::exists(jobs + "/checkpoints/epoch-2/stage-0.pt"));
  EXPECT_TRUE(
      std::filesystem::exists(jobs + "/checkpoints/epoch-2/stage-1.pt"));

  // The record keeps each epoch's end, without the stage table; status
  // writes the report `petra train --report` would, and plot draws it.
  const petra::v1::Job done = GetJob(first);
  ASSERT_EQ(done.epochs_size(), 2) << done.DebugString();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(done.epochs(i).epoch(), static_cast<uint32_t>(i + 1));
    EXPECT_EQ(done.epochs(i).stages_size(), 0);
    EXPECT_TRUE(done.epochs(i).has_test_accuracy());
  }
  EXPECT_LT(done.epochs(0).step(), done.epochs(1).step());
  const std::string report = dir_.path() + "/report.json";
  ASSERT_EQ(Petra({"status", "--report", report, first}).exit_code, 0);
  std::string report_text;
  {
    std::ifstream in(report);
    report_text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_THAT(report_text, HasSubstr("\"epoch\": 2, \"step\": "));
  EXPECT_THAT(report_text, HasSubstr("\"bubble_fraction\""));
  const std::string png = dir_.path() + "/job.png";
  // Debian's Python, whatever python3 comes first on this PATH.
  RunResult plot =
      Petra({"plot", "--python", "/usr/bin/python3", "--output", png, first});
  ASSERT_EQ(plot.exit_code, 0) << plot.out << plot.err;
  EXPECT_THAT(plot.out, HasSubstr("wrote " + png));
  // A PNG, and a drawing: not one colour (PIL counts them).
  RunResult colours =
      RunToExit("/usr/bin/python3",
                {"-c",
                 "import sys\n"
                 "from PIL import Image\n"
                 "im = Image.open(sys.argv[1])\n"
                 "assert im.format == 'PNG', im.format\n"
                 "assert im.size[0] >= 800 and im.size[1] >= 600, im.size\n"
                 "n = len(im.convert('RGB').getcolors(1 << 24))\n"
                 "assert n > 20, n\n"
                 "print(n, 'colours')\n",
                 png});
  EXPECT_EQ(colours.exit_code, 0) << colours.out << colours.err;
  RunResult missing = Petra({"plot", "--python", "/usr/bin/python3", "--report",
                             dir_.path() + "/none.json"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("none.json: No such file"));

  RunResult list = Petra({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr(first));
  EXPECT_THAT(list.out, HasSubstr(second));

  const std::string exported = dir_.path() + "/model.pt";
  RunResult e = Petra({"export", "--output", exported, first});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  ASSERT_GT(std::filesystem::file_size(exported), 1000u);
  // Python's torch.load reads it as a state_dict of the documented names.
  RunResult py = RunToExit(
      "/usr/bin/python3",
      {"-c",
       "import sys, torch\n"
       "sd = torch.load(sys.argv[1])\n"
       "assert isinstance(sd, dict), type(sd)\n"
       "assert all(isinstance(v, torch.Tensor) for v in sd.values())\n"
       "assert any(k.startswith('blocks.0.') for k in sd), list(sd)[:5]\n"
       "assert any(k.startswith('blocks.9.') for k in sd), list(sd)[-5:]\n"
       "print(len(sd), 'tensors')\n",
       exported});
  EXPECT_EQ(py.exit_code, 0) << py.out << py.err;
  EXPECT_THAT(py.out, HasSubstr("tensors"));
}

TEST_F(FleetProcesses, CancelStopsARunningJobAndFreesTheStages) {
  StartStages(2);
  StartCoordinator();
  const std::string id = Submit(SmallJob(200));
  ASSERT_TRUE(
      WaitForStatus(id, "\"samples_per_second\"", std::chrono::seconds(60)))
      << StatusJson(id);
  RunResult cancel = Petra({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_TRUE(
      WaitForStatus(id, "JOB_STATE_CANCELLED", std::chrono::seconds(15)))
      << StatusJson(id);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(StageStatus(j).state(), petra::v1::StageStatus::STATE_IDLE);
  }
  // Cancelled mid-transfer, its shared-memory rings all went with it.
  ExpectNoRingsLeft();
  // The freed servers take the next job.
  const std::string next = Submit(SmallJob(1));
  RunResult watch = Petra({"watch", next});
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  // An ended job cannot be cancelled, and the answer says so.
  RunResult late = Petra({"cancel", next});
  EXPECT_EQ(late.exit_code, 1) << late.out << late.err;
  EXPECT_THAT(late.err,
              HasSubstr("has already ended (succeeded): nothing to cancel"))
      << late.err;
  EXPECT_EQ(late.out, "");
}

// Servers that offer no shared memory (PETRA_TRANSPORTS=grpc): transport
// auto trains over gRPC and says so per link; transport shm or cuda_ipc,
// asked for by name, fails the job at assignment naming the link and why.
TEST_F(FleetProcesses, TheTransportIsChosenPerLinkFromWhatBothEndsOffer) {
  ASSERT_EQ(setenv("PETRA_TRANSPORTS", "grpc", 1), 0);
  StartStages(2);
  unsetenv("PETRA_TRANSPORTS");
  StartCoordinator();
  EXPECT_EQ(StageStatus(0).endpoint().transports_size(), 1);
  EXPECT_TRUE(StageStatus(0).endpoint().shm_domain().empty());

  const std::string shm = Submit([] {
    std::vector<std::string> job = SmallJob(1);
    job.insert(job.end(), {"--transport", "shm"});
    return job;
  }());
  ASSERT_TRUE(WaitForStatus(shm, "JOB_STATE_FAILED", std::chrono::seconds(60)))
      << StatusJson(shm);
  EXPECT_THAT(GetJob(shm).error().message(),
              HasSubstr("transport shm: stage 0 (" + stage_addresses_[0] +
                        ") <-> stage 1 (" + stage_addresses_[1] +
                        ") cannot share memory: the sender has no usable "
                        "/dev/shm"));
  // cuda_ipc needs a CUDA build on a GPU (and shared memory for its slots).
  const std::string ipc = Submit([] {
    std::vector<std::string> job = SmallJob(1);
    job.insert(job.end(), {"--transport", "cuda_ipc"});
    return job;
  }());
  ASSERT_TRUE(WaitForStatus(ipc, "JOB_STATE_FAILED", std::chrono::seconds(60)))
      << StatusJson(ipc);
  EXPECT_THAT(GetJob(ipc).error().message(),
              HasSubstr("transport cuda_ipc: stage 0 (" + stage_addresses_[0] +
                        ") <-> stage 1 (" + stage_addresses_[1] +
                        "): the sender does not offer it"));

  const std::string id = Submit(SmallJob(1));
  ASSERT_TRUE(
      WaitForStatus(id, "JOB_STATE_SUCCEEDED", std::chrono::seconds(120)))
      << StatusJson(id);
  const petra::v1::Job done = GetJob(id);
  EXPECT_EQ(done.stages(0).transport_to_next(), petra::v1::TRANSPORT_GRPC);
  EXPECT_EQ(done.stages(0).transport_from_feed(), petra::v1::TRANSPORT_GRPC);
  RunResult status = Petra({"status", id});
  EXPECT_THAT(status.out, HasSubstr("to next"));
  EXPECT_THAT(status.out, ::testing::ContainsRegex("\n0 .* grpc\n"));
}

// Ctrl-C on `submit --watch` stops the following, not the job, and says so
// and how to stop the job.
TEST_F(FleetProcesses, CtrlCOnSubmitWatchLeavesTheJobRunningAndSaysSo) {
  StartStages(2);
  StartCoordinator();
  std::vector<std::string> args = {"submit", "--coordinator", address_,
                                   "--watch"};
  for (const std::string& a : SmallJob(200)) args.push_back(a);
  Subprocess submit(kPetra, args);
  // Following: the first epoch's bar or its end (a SmallJob epoch may end
  // before the bar is first drawn).
  ASSERT_THAT(submit.WaitForLine("epoch 1/200"), HasSubstr("epoch 1/200"))
      << submit.out() << submit.err();
  EXPECT_EQ(submit.SignalAndWait(SIGINT, std::chrono::seconds(30)), 130);
  EXPECT_THAT(submit.err(),
              HasSubstr("stopped following; job-1 keeps running on the "
                        "coordinator (petra watch job-1 follows it again, "
                        "petra cancel job-1 stops it)"));
  EXPECT_TRUE(
      WaitForStatus("job-1", "JOB_STATE_RUNNING", std::chrono::seconds(10)))
      << StatusJson("job-1");
  EXPECT_EQ(Petra({"cancel", "job-1"}).exit_code, 0);
}

// Reads a job's train_log.csv: "epoch,micro_batch,step,loss" rows.
std::vector<std::vector<std::string>> TrainLog(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> row;
    std::stringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');) row.push_back(f);
    rows.push_back(row);
  }
  return rows;
}

TEST_F(FleetProcesses, AResumedJobTrainsAsIfNeverInterrupted) {
  StartStages(2);
  StartCoordinator();
  std::vector<std::string> job = SmallJob(2);
  job.insert(job.end(), {"--checkpoint-every", "1"});
  const std::string whole = Submit(job);
  ASSERT_EQ(Petra({"watch", whole}, std::chrono::seconds(300)).exit_code, 0);
  const std::string jobs = dir_.path() + "/coordinator/jobs/";
  // Damage the newest checkpoint: the resume must notice and use epoch 1.
  const std::string damaged = jobs + whole + "/checkpoints/epoch-2/stage-1.pt";
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f) << damaged;
    f.seekp(200);
    f.put('\x5a');
  }

  // Refusals first: unknown job, a spec that changes the network, a job
  // still running.
  RunResult r = Petra({"submit", "--resume-from", "job-404"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no job with id \"job-404\""));
  r = Petra({"submit", "--resume-from", whole, "--width", "0.25"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot resume job \"" + whole + "\""));
  EXPECT_THAT(r.err, HasSubstr("model.width"));
  const std::string busy = Submit(SmallJob(200));
  r = Petra({"submit", "--resume-from", busy});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("has not ended"));
  ASSERT_EQ(Petra({"cancel", busy}).exit_code, 0);
  ASSERT_TRUE(
      WaitForStatus(busy, "JOB_STATE_CANCELLED", std::chrono::seconds(60)));

  // The resumed job takes the whole job's own spec and trains epoch 2 only.
  const std::string resumed = Submit({"--resume-from", whole});
  RunResult watch = Petra({"watch", resumed}, std::chrono::seconds(300));
  ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  // The coordinator's log says which checkpoint it used and why.
  EXPECT_THAT(coordinator_->WaitForLine("passed over a checkpoint of"),
              HasSubstr(whole + ": epoch-2: stage-1.pt does not match its "
                                "SHA-256"));
  EXPECT_THAT(coordinator_->WaitForLine("resumed from"),
              HasSubstr("epoch-1 (epoch 1, "));
  const auto a = TrainLog(jobs + whole + "/train_log.csv");
  const auto b = TrainLog(jobs + resumed + "/train_log.csv");
  std::vector<std::vector<std::string>> a2;
  for (const auto& row : a) {
    if (row[0] == "2") a2.push_back(row);
  }
  ASSERT_EQ(b.size(), a2.size());
  ASSERT_FALSE(b.empty());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i][0], "2");
    EXPECT_EQ(b[i][1], a2[i][1]);
    EXPECT_EQ(b[i][2], a2[i][2]);  // the same optimizer step
    const double x = std::stod(a2[i][3]), y = std::stod(b[i][3]);
    EXPECT_NEAR(y, x, 1e-5 * std::max(1.0, std::abs(x))) << "row " << i;
  }
  const std::string whole_json = StatusJson(whole);
  const std::string resumed_json = StatusJson(resumed);
  auto test_accuracy = [](const std::string& json) {
    const std::string key = "\"test_accuracy\":";
    const size_t at = json.find(key);
    return at == std::string::npos ? -1.0
                                   : std::stod(json.substr(at + key.size()));
  };
  EXPECT_GT(test_accuracy(whole_json), 0);
  EXPECT_NEAR(test_accuracy(resumed_json), test_accuracy(whole_json), 1e-6);

  // Nothing left to train: the resumed job's own checkpoint is at epoch 2.
  const std::string again = Submit({"--resume-from", resumed});
  EXPECT_TRUE(WaitForStatus(again, "nothing is left to train",
                            std::chrono::seconds(60)))
      << StatusJson(again);
}

// Forward gradients resume the same way: the auxiliary heads come back from
// the checkpoint, and the random guesses depend on the step and micro-batch,
// not on how long the servers have run.
TEST_F(FleetProcesses, AResumedForwardGradientJobTrainsAsIfNeverInterrupted) {
  StartStages(2);
  StartCoordinator();
  for (const char* guess : {"local", "random"}) {
    SCOPED_TRACE(guess);
    // Micro-batches of 16: a forward-gradient step pushes tangents through
    // every block, and what is checked is the resume, not the rate.
    std::vector<std::string> job = SmallJob(2);
    job.insert(job.end(),
               {"--checkpoint-every", "1", "--mode", "forward_gradient",
                "--guess", guess, "--lr", "0.002", "--micro-batch", "16",
                "--train-limit", "256"});
    const std::string whole = Submit(job);
    ASSERT_EQ(Petra({"watch", whole}, std::chrono::seconds(300)).exit_code, 0);
    const std::string jobs = dir_.path() + "/coordinator/jobs/";
    // Without a usable epoch-2 checkpoint the resume starts at epoch 1's.
    const std::string damaged =
        jobs + whole + "/checkpoints/epoch-2/stage-0.pt";
    {
      std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
      ASSERT_TRUE(f) << damaged;
      f.seekp(200);
      f.put('\x5a');
    }
    const std::string resumed = Submit({"--resume-from", whole});
    RunResult watch = Petra({"watch", resumed}, std::chrono::seconds(300));
    ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
    const auto a = TrainLog(jobs + whole + "/train_log.csv");
    const auto b = TrainLog(jobs + resumed + "/train_log.csv");
    std::vector<std::vector<std::string>> a2;
    for (const auto& row : a) {
      if (row[0] == "2") a2.push_back(row);
    }
    ASSERT_EQ(b.size(), a2.size());
    ASSERT_FALSE(b.empty());
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i][1], a2[i][1]);
      const double x = std::stod(a2[i][3]), y = std::stod(b[i][3]);
      EXPECT_NEAR(y, x, 1e-5 * std::max(1.0, std::abs(x))) << "row " << i;
    }
  }
}

TEST_F(FleetProcesses, UnreachableStageFailsTheJobWithinTenSeconds) {
  stage_addresses_ = {Loopback(UnusedLoopbackPort())};
  StartCoordinator();
  const auto start = Clock::now();
  std::vector<std::string> job = SmallJob(1);
  job[7] = "1";  // --stages 1
  const std::string id = Submit(job);
  RunResult watch = Petra({"watch", id});
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(watch.exit_code, 1);
  EXPECT_THAT(watch.out, HasSubstr("failed"));
  EXPECT_THAT(watch.out, HasSubstr("the job needs 1 stage server and 0 "
                                   "answered and were free: stage server " +
                                   stage_addresses_[0] + " is unreachable"));
  EXPECT_LT(seconds, 10);
}

TEST_F(FleetProcesses, StageServerFinishesItsPassAndStopsOnSigterm) {
  StartStages(2);
  StartCoordinator();
  // Passes of 256 micro-batches (of 64), not 16: the SIGTERM below must
  // reach the stage inside a pass. Between two passes it has nothing to
  // drain and stops at once, and with passes of 16 micro-batches a loaded
  // machine froze the coordinator in such a gap about once in five runs.
  std::vector<std::string> flags = SmallJob(200);
  auto limit = std::find(flags.begin(), flags.end(), "--train-limit");
  ASSERT_NE(limit, flags.end());
  *(limit + 1) = "16384";
  const std::string id = Submit(flags);
  ASSERT_TRUE(
      WaitForStatus(id, "\"samples_per_second\"", std::chrono::seconds(60)));
  // While it drains, its health check says NOT_SERVING (2), so readiness
  // probes stop routing work to it. The coordinator is frozen first, so the
  // pass being drained cannot end before the check is made: on a loaded
  // machine it ended, and the server was gone, before a check got through.
  ASSERT_EQ(kill(coordinator_->pid(), SIGSTOP), 0);
  ASSERT_EQ(kill(stages_[1]->pid(), SIGTERM), 0);
  ASSERT_NE(stages_[1]->WaitForLine("stopping"), "");
  int health = -1;
  for (int i = 0; i < 50 && health != 2; ++i) {
    health = HealthCheck(stage_addresses_[1]);
    if (health != 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(coordinator_->pid(), SIGCONT), 0);
  EXPECT_EQ(health, 2);
  // Signal 0 only waits for the drained server to exit.
  EXPECT_EQ(stages_[1]->SignalAndWait(0, std::chrono::seconds(60)), 0)
      << stages_[1]->err();
  EXPECT_THAT(stages_[1]->out(), HasSubstr("stopped"));
  // The job waits --recovery-timeout (5 s here) for the stage or a spare;
  // none comes, so it fails and says why.
  EXPECT_TRUE(WaitForStatus(id, "JOB_STATE_FAILED", std::chrono::seconds(30)))
      << StatusJson(id);
  const petra::v1::Job job = GetJob(id);
  ASSERT_EQ(job.recoveries_size(), 1) << job.DebugString();
  EXPECT_THAT(job.error().message(),
              HasSubstr("only 1 answered and were free within 5 s "
                        "(--recovery-timeout)"));
  EXPECT_THAT(job.error().message(), HasSubstr(stage_addresses_[1]));
  EXPECT_EQ(StageStatus(0).state(), petra::v1::StageStatus::STATE_IDLE);
}

// Bad input to the client commands and the coordinator: a clear error and
// exit code, and the coordinator goes on serving.
TEST_F(FleetProcesses, ClientCommandsRefuseBadInputClearly) {
  StartStages(1);
  StartCoordinator();
  RunResult r = Petra({"watch"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("expected one JOB_ID argument, got 0"));
  r = Petra({"list", "--state", "sleeping"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("flag --state: unknown state \"sleeping\""));
  for (const char* command : {"status", "cancel", "export", "watch"}) {
    r = Petra({command, "job-404"});
    EXPECT_EQ(r.exit_code, 1) << command;
    EXPECT_THAT(r.err, HasSubstr("no job with id \"job-404\"")) << command;
  }
  r = Petra({"submit", "--epochs", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("training.epochs = 0"));
  // Refused before anything is submitted or followed.
  for (const char* command : {"watch", "submit"}) {
    std::vector<std::string> args = {command, "--reconnect-timeout", "-1"};
    if (std::string(command) == "watch") args.push_back("job-1");
    r = Petra(args);
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_THAT(r.err, HasSubstr("flag --reconnect-timeout: -1 is not in "
                                 "[0, 604800]"))
        << command;
  }
  EXPECT_EQ(Petra({"list"}).out.find("job-"), std::string::npos);
  r = RunToExit(kPetra, {"status", "--coordinator", "nohost", "job-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--coordinator"));
  r = RunToExit(kPetra, {"status", "--coordinator",
                         Loopback(UnusedLoopbackPort()), "job-1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator"));
  // Nothing listens there: no TLS hint, which could not help.
  EXPECT_THAT(r.err, HasSubstr("nothing listens there"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("TLS")));
  // petra health: the probe the container image and compose use.
  r = RunToExit(kPetra, {"health", "--address", stage_addresses_[0]});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(": SERVING"));
  r = RunToExit(kPetra, {"health", "--address", stage_addresses_[0],
                         "--service", "no.such.Service"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("SERVICE_UNKNOWN"));
  r = RunToExit(kPetra, {"health", "--address", Loopback(UnusedLoopbackPort()),
                         "--timeout-seconds", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("health check of"));
  r = RunToExit(kPetra, {"health", "--address", "nohost"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--address"));
  r = RunToExit(kPetra, {"health", "--timeout-seconds", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--timeout-seconds must be in (0, 3600]"));
  r = RunToExit(kPetra, {"train", "--resume-from", "job-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--resume-from needs the fleet runner and the "
                               "--state-dir"));
  r = RunToExit(kPetra, {"train", "--replicas", "0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("replicas"));
  r = RunToExit(kPetra, {"train", "--runner", "threads"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("flag --runner: \"threads\""));
  r = RunToExit(kStage, {"--listen", "127.0.0.1:0", "--drain-seconds", "-1",
                         "--state-dir", dir_.path() + "/other"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--drain-seconds: -1 is not in [0, 86400]"));

  auto stub = petra::v1::CoordinatorService::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext c1;
  petra::v1::ListJobsRequest list;
  list.set_page_token("page-two");
  petra::v1::ListJobsResponse listed;
  grpc::Status s = stub->ListJobs(&c1, list, &listed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_token \"page-two\""));
  grpc::ClientContext c2;
  petra::v1::ExportJobRequest format;
  format.set_job_id("job-1");
  format.set_format(static_cast<petra::v1::ExportJobRequest::Format>(7));
  auto reader = stub->ExportJob(&c2, format);
  petra::v1::ExportChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("format 7"));
  // Still serving.
  EXPECT_EQ(Petra({"list"}).exit_code, 0);
}

}  // namespace
}  // namespace petra::testing

// The fleet as separate processes for integration tests: stage servers and
// a coordinator on loopback ephemeral ports, driven by the `petra` client.
#pragma once

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "petra/v1/stage.grpc.pb.h"
#include "services/base/proto_json.h"
#include "services/link/shared_ring.h"
#include "tests/integration/binaries.h"
#include "tests/integration/subprocess.h"

namespace petra::testing {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

// A small job on synthetic data: 16 micro-batches an epoch (about a second
// on 2 cores), 256 test samples. (job[7] is the stage count.)
inline std::vector<std::string> SmallJob(int epochs) {
  return {"--arch",        "revnet18",
          "--width",       "0.125",
          "--dataset",     "synthetic",
          "--stages",      "2",
          "--epochs",      std::to_string(epochs),
          "--seed",        "3",
          "--train-limit", "1024",
          "--test-limit",  "256"};
}

class FleetProcesses : public ::testing::Test {
 protected:
  // `extra`: more flags for every server; `prefix`: a program the server
  // runs under, with its arguments (prlimit, say).
  void StartStages(int n, const std::vector<std::string>& extra = {},
                   const std::vector<std::string>& prefix = {}) {
    for (int j = 0; j < n; ++j) {
      stages_.emplace_back();
      stage_addresses_.emplace_back();
      StartStage(static_cast<int>(stages_.size()) - 1, 0, extra, prefix);
    }
  }

  // Starts stage server `j` (again) on `port` (0: an ephemeral one) with a
  // state dir of its own; a restarted server gets a fresh one, as a pod
  // whose disk is gone.
  void StartStage(int j, int port, const std::vector<std::string>& extra = {},
                  const std::vector<std::string>& prefix = {}) {
    std::vector<std::string> args = {"--listen",
                                     Loopback(port),
                                     "--metrics-listen",
                                     "",
                                     "--threads",
                                     "1",
                                     "--state-dir",
                                     dir_.path() + "/stage-" +
                                         std::to_string(j) + "-" +
                                         std::to_string(++stage_starts_)};
    args.insert(args.end(), extra.begin(), extra.end());
    // Open on loopback unless the test locks it (a token or mutual TLS).
    if (std::find_if(extra.begin(), extra.end(), [](const std::string& a) {
          return a == "--fleet-token-file" || a == "--coordinator-identity";
        }) == extra.end()) {
      args.push_back("--insecure");
    }
    std::string program = kStage;
    if (!prefix.empty()) {
      args.insert(args.begin(), kStage);
      args.insert(args.begin(), prefix.begin() + 1, prefix.end());
      program = prefix.front();
    }
    stages_[j] = std::make_unique<Subprocess>(program, args);
    const int bound =
        NumberAfter(stages_[j]->WaitForLine("listening on port"), "port ");
    ASSERT_GT(bound, 0) << stages_[j]->err();
    stage_addresses_[j] = Loopback(bound);
  }

  // A job that loses a stage waits `recovery_timeout` seconds for it.
  // `extra` may name --listen (a restart on the port the servers know) and
  // --stages (none: a fleet of registered servers); the fixture's own are
  // left out then.
  void StartCoordinator(int recovery_timeout = 5,
                        const std::vector<std::string>& extra = {},
                        const std::vector<std::string>& prefix = {}) {
    std::string list;
    for (const std::string& a : stage_addresses_) {
      list += (list.empty() ? "" : ",") + a;
    }
    auto given = [&](const char* flag) {
      return std::find(extra.begin(), extra.end(), flag) != extra.end();
    };
    std::vector<std::string> args = {
        "--metrics-listen",   "",
        "--data-root",        "/usr/share/datasets",
        "--state-dir",        dir_.path() + "/coordinator",
        "--recovery-timeout", std::to_string(recovery_timeout)};
    if (!given("--listen"))
      args.insert(args.end(), {"--listen", "127.0.0.1:0"});
    if (!given("--stages")) args.insert(args.end(), {"--stages", list});
    args.insert(args.end(), extra.begin(), extra.end());
    std::string program = kCoordinator;
    if (!prefix.empty()) {
      args.insert(args.begin(), kCoordinator);
      args.insert(args.begin(), prefix.begin() + 1, prefix.end());
      program = prefix.front();
    }
    coordinator_ = std::make_unique<Subprocess>(program, args);
    // 60 s: on a loaded 2-core machine (CI's last test, 2026-11-28) a
    // restarted coordinator took over 30 s to print its port.
    const auto asked = std::chrono::steady_clock::now();
    const int port =
        NumberAfter(coordinator_->WaitForLine("listening on port",
                                              std::chrono::seconds(60)),
                    "port ");
    ASSERT_GT(port, 0) << "after "
                       << std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - asked)
                              .count()
                       << " s; stdout: " << coordinator_->out()
                       << "; stderr: " << coordinator_->err();
    address_ = Loopback(port);
  }

  RunResult Petra(std::vector<std::string> args,
                  std::chrono::seconds timeout = std::chrono::seconds(120)) {
    args.insert(args.begin() + 1, {"--coordinator", address_});
    return RunToExit(kPetra, args, timeout);
  }

  std::string Submit(const std::vector<std::string>& job) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), job.begin(), job.end());
    RunResult r = Petra(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out.substr(0, r.out.find('\n'));
    EXPECT_THAT(id, HasSubstr("job-"));
    return id;
  }

  std::string StatusJson(const std::string& id) {
    return Petra({"status", "--json", id}).out;
  }

  // The job's train_log.csv ("epoch,micro_batch,step,loss" rows) as
  // (epoch, micro-batch) -> loss, the last row of each: a recovered epoch's
  // rows replace what it logged before the fault.
  std::map<std::pair<int, int>, double> Losses(const std::string& id) {
    std::ifstream in(dir_.path() + "/coordinator/jobs/" + id +
                     "/train_log.csv");
    std::map<std::pair<int, int>, double> out;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::stringstream f(line);
      std::string e, m, step, loss;
      std::getline(f, e, ',');
      std::getline(f, m, ',');
      std::getline(f, step, ',');
      std::getline(f, loss, ',');
      out[{std::stoi(e), std::stoi(m)}] = std::stod(loss);
    }
    return out;
  }

  // Polls the job until its JSON (what `petra status --json` prints, asked
  // over gRPC: a `petra` process a poll cost 0.8 CPU-seconds, a minute of
  // CPU in a long wait) contains `text` or `timeout` passes. Waiting for
  // a state, a job that ended in another one ends the wait at once (a job
  // that failed is not left to time out).
  bool WaitForStatus(const std::string& id, const std::string& text,
                     std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    const bool awaits_state = text.rfind("JOB_STATE_", 0) == 0;
    while (Clock::now() < end) {
      petra::v1::Job job;
      if (AskJob(id, &job).ok()) {
        if (base::ProtoToJson(job).find(text) != std::string::npos) {
          return true;
        }
        if (awaits_state && (job.state() == petra::v1::JOB_STATE_SUCCEEDED ||
                             job.state() == petra::v1::JOB_STATE_FAILED ||
                             job.state() == petra::v1::JOB_STATE_CANCELLED)) {
          return false;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // The job as the coordinator answers GetJob (no client process: polling
  // through `petra status` would start one each time).
  petra::v1::Job GetJob(const std::string& id) {
    petra::v1::Job job;
    grpc::Status s = AskJob(id, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  grpc::Status AskJob(const std::string& id, petra::v1::Job* job) {
    auto stub = petra::v1::CoordinatorService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    petra::v1::GetJobRequest request;
    request.set_job_id(id);
    return stub->GetJob(&context, request, job);
  }

  // Polls GetJob until `done(job)` or `timeout`; returns the last answer.
  petra::v1::Job WaitFor(const std::string& id,
                         const std::function<bool(const petra::v1::Job&)>& done,
                         std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    petra::v1::Job job = GetJob(id);
    while (!done(job) && Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      job = GetJob(id);
    }
    return job;
  }

  petra::v1::Job WaitForState(const std::string& id, petra::v1::JobState state,
                              std::chrono::seconds timeout) {
    return WaitFor(
        id, [&](const petra::v1::Job& j) { return j.state() == state; },
        timeout);
  }

  // Waits up to `timeout` for the job to end (succeed, fail or cancel).
  petra::v1::Job WaitForTheEnd(const std::string& id,
                               std::chrono::seconds timeout) {
    return WaitFor(
        id,
        [](const petra::v1::Job& job) {
          return job.state() >= petra::v1::JOB_STATE_SUCCEEDED;
        },
        timeout);
  }

  // Waits until the job's newest checkpoint is that of epoch `epochs` while
  // it runs: it is then training the next epoch. (Progress events come
  // every 2 s, too rarely to tell a short epoch by; the checkpoint is
  // there for the whole of the next epoch.)
  void WaitUntilTrainingAfter(const std::string& id, uint32_t epochs) {
    const std::string newest = "/epoch-" + std::to_string(epochs);
    auto training_after = [&](const petra::v1::Job& j) {
      return j.state() == petra::v1::JOB_STATE_RUNNING &&
             absl::EndsWith(j.last_checkpoint(), newest);
    };
    const petra::v1::Job job =
        WaitFor(id, training_after, std::chrono::seconds(180));
    ASSERT_TRUE(training_after(job)) << job.DebugString();
  }

  // No shared-memory ring of the data channels (docs/DATA_PLANE.md) is
  // left once jobs ended: no running fleet process maps one or has one
  // named, and the names of processes that were killed were swept (by
  // the servers that started after them). Rings are let go as their pass
  // ends, so this waits a little for the last pass's streams to close.
  void ExpectNoRingsLeft(const std::vector<pid_t>& killed = {}) {
    std::vector<pid_t> live;
    for (const auto& s : stages_) {
      if (s != nullptr && s->pid() > 0) live.push_back(s->pid());
    }
    if (coordinator_ != nullptr && coordinator_->pid() > 0) {
      live.push_back(coordinator_->pid());
    }
    auto left = [&] {
      int n = 0;
      for (pid_t p : live)
        n += link::CountRingMappings(p) + link::CountRingNames(p);
      for (pid_t p : killed) n += link::CountRingNames(p);
      return n;
    };
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (left() > 0 && Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (pid_t p : live) {
      EXPECT_EQ(link::CountRingMappings(p), 0) << "process " << p;
      EXPECT_EQ(link::CountRingNames(p), 0) << "process " << p;
    }
    for (pid_t p : killed) {
      EXPECT_EQ(link::CountRingNames(p), 0) << "killed process " << p;
    }
    // Nor does a live stage hold bulk-channel payloads.
    for (size_t j = 0; j < stages_.size(); ++j) {
      if (stages_[j] != nullptr && stages_[j]->pid() > 0) {
        EXPECT_EQ(StageStatus(static_cast<int>(j)).bulk_inbox_bytes(), 0u)
            << "stage server " << j;
      }
    }
  }

  petra::v1::StageStatus StageStatus(int j) {
    auto stub = petra::v1::StageService::NewStub(grpc::CreateChannel(
        stage_addresses_[j], grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    petra::v1::StageStatus status;
    EXPECT_TRUE(stub->GetStatus(&context, {}, &status).ok());
    return status;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<Subprocess>> stages_;
  std::vector<std::string> stage_addresses_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
  int stage_starts_ = 0;
};

}  // namespace petra::testing

// The fleet's control logic against fake stage servers: no gRPC.
#include "coordinator/fleet_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

// A stage server as the coordinator sees it: a status, a job, and a
// checkpoint file it hands out in pieces.
struct FakeServer {
  bool up = true;
  petra::v1::StageStatus status;
  std::string checkpoint;
  std::string restored;
  int restore_pieces = 0;
  std::vector<std::string> released;
};

class FakeClient : public StageClient {
 public:
  explicit FakeClient(FakeServer& s) : s_(s) {}
  absl::StatusOr<petra::v1::StageStatus> GetStatus() override {
    if (!s_.up) return absl::UnavailableError("connection refused");
    return s_.status;
  }
  absl::Status Assign(const petra::v1::AssignRequest& r,
                      petra::v1::AssignResponse* out) override {
    if (!s_.up) return absl::UnavailableError("connection refused");
    if (!s_.status.job_id().empty()) {
      return absl::FailedPreconditionError("this stage already holds a job");
    }
    s_.status.set_job_id(r.job_id());
    out->set_parameter_count(42);
    return absl::OkStatus();
  }
  absl::Status Start(const petra::v1::StartRequest&) override {
    return absl::OkStatus();
  }
  absl::Status Checkpoint(const petra::v1::CheckpointRequest&,
                          petra::v1::CheckpointResponse* out) override {
    out->set_path("job-1/epoch-1/stage-0.pt");
    out->set_size_bytes(s_.checkpoint.size());
    out->set_sha256(base::Sha256Hex(s_.checkpoint));
    return absl::OkStatus();
  }
  absl::Status ReadCheckpoint(const petra::v1::ReadCheckpointRequest& r,
                              petra::v1::ReadCheckpointResponse* out) override {
    // Pieces smaller than asked for, to take several reads.
    out->set_data(s_.checkpoint.substr(r.offset(), r.max_bytes() / 4));
    return absl::OkStatus();
  }
  absl::Status RestoreCheckpoint(
      const petra::v1::RestoreCheckpointRequest& r,
      petra::v1::RestoreCheckpointResponse* out) override {
    s_.restored += r.data();
    ++s_.restore_pieces;
    out->set_restored(s_.restored.size() == r.total_bytes());
    return absl::OkStatus();
  }
  absl::Status Release(const petra::v1::ReleaseRequest& r,
                       bool best_effort) override {
    s_.released.push_back(r.job_id() + (best_effort ? " (best effort)" : ""));
    s_.status.clear_job_id();
    return absl::OkStatus();
  }
  std::unique_ptr<FeedStream> OpenFeed(const std::string&, const std::string&,
                                       OnDone) override {
    return nullptr;
  }

 private:
  FakeServer& s_;
};

class FleetControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("petra-fleet-control-", ::getpid());
  }
  void TearDown() override { base::RemoveTree(dir_).IgnoreError(); }
  StageConnector connect() {
    return [this](const std::string& a) {
      return std::make_unique<FakeClient>(servers_[a]);
    };
  }
  std::map<std::string, FakeServer> servers_;
  std::filesystem::path dir_;
};

TEST_F(FleetControlTest, ProbeTakesFreeServersInOrderAndSaysWhyOthersNot) {
  servers_["a:1"].up = false;
  servers_["b:1"].status.set_state(petra::v1::StageStatus::STATE_DRAINING);
  servers_["c:1"].status.set_state(petra::v1::StageStatus::STATE_IDLE);
  // Holding a job left from before a restart: taken, to be released.
  servers_["d:1"].status.set_state(petra::v1::StageStatus::STATE_RUNNING);
  servers_["d:1"].status.set_job_id("job-0");
  servers_["e:1"].status.set_state(petra::v1::StageStatus::STATE_IDLE);
  servers_["e:1"].status.set_memory_capacity_bytes(5000);
  servers_["e:1"].status.set_memory_capacity_source("its limit");
  ServerProbe probe({"a:1", "b:1", "c:1", "d:1", "e:1"}, connect());
  ProbeResult r = probe.Round();
  EXPECT_EQ(r.chosen, (std::vector<std::string>{"c:1", "d:1", "e:1"}));
  EXPECT_EQ(r.held, (std::vector<std::string>{"", "job-0", ""}));
  EXPECT_EQ(r.memory_bytes, (std::vector<int64_t>{0, 0, 5000}));
  EXPECT_EQ(r.memory_sources[2], "its limit");
  ASSERT_EQ(r.missing.size(), 2u);
  EXPECT_EQ(r.missing[0],
            "stage server a:1 is unreachable: connection refused");
  EXPECT_EQ(r.missing[1], "stage server b:1 is STATE_DRAINING");
  // Placement keeps some, in its order.
  r.Keep({2, 1});
  EXPECT_EQ(r.chosen, (std::vector<std::string>{"e:1", "d:1"}));
  EXPECT_EQ(r.held, (std::vector<std::string>{"", "job-0"}));
  EXPECT_EQ(r.memory_bytes, (std::vector<int64_t>{5000, 0}));
  EXPECT_EQ(r.missing.size(), 2u);

  StageFleet fleet("job-1", r.chosen, connect());
  ASSERT_TRUE(fleet.ReleaseStale(r.held).ok());
  // A stale job must be released: the full control deadline, not best
  // effort.
  EXPECT_EQ(servers_["d:1"].released, (std::vector<std::string>{"job-0"}));
  EXPECT_TRUE(servers_["e:1"].released.empty());
  fleet.ReleaseAll();
  EXPECT_EQ(servers_["e:1"].released,
            (std::vector<std::string>{"job-1 (best effort)"}));
  EXPECT_TRUE(servers_["c:1"].released.empty());
}

TEST_F(FleetControlTest, ADrainingServerIsNotTakenEvenWhileItHoldsAJob) {
  // SIGTERM while a job runs: the server drains and still holds the job.
  servers_["a:1"].status.set_state(petra::v1::StageStatus::STATE_DRAINING);
  servers_["a:1"].status.set_job_id("job-1");
  servers_["b:1"].status.set_state(petra::v1::StageStatus::STATE_IDLE);
  ServerProbe probe({"a:1", "b:1"}, connect());
  ProbeResult r = probe.Round();
  EXPECT_EQ(r.chosen, (std::vector<std::string>{"b:1"}));
  ASSERT_EQ(r.missing.size(), 1u);
  EXPECT_EQ(r.missing[0], "stage server a:1 is STATE_DRAINING");
}

TEST_F(FleetControlTest, PollNamesTheStageThatFailedOrLeft) {
  for (const char* a : {"a:1", "b:1"}) {
    servers_[a].status.set_state(petra::v1::StageStatus::STATE_RUNNING);
    servers_[a].status.set_job_id("job-1");
  }
  StageFleet fleet("job-1", {"a:1", "b:1"}, connect());
  absl::StatusOr<std::vector<petra::v1::StageStats>> stats = fleet.Poll();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[1].stage_index(), 1u);
  EXPECT_EQ((*stats)[1].address(), "b:1");
  EXPECT_FALSE(fleet.LostAStage(absl::InternalError("the job's own")));

  servers_["b:1"].status.set_job_id("job-9");
  EXPECT_THAT(std::string(fleet.Poll().status().message()),
              HasSubstr("stage 1 (b:1) no longer holds the job"));
  EXPECT_TRUE(fleet.LostAStage(absl::InternalError("anything")));

  servers_["b:1"].up = false;
  absl::Status s = fleet.Poll().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "stage 1 (b:1) is unreachable: connection refused");

  servers_["b:1"].up = true;
  servers_["b:1"].status.set_job_id("job-1");
  servers_["b:1"].status.set_state(petra::v1::StageStatus::STATE_FAILED);
  servers_["b:1"].status.mutable_error()->set_code(9);
  servers_["b:1"].status.mutable_error()->set_message("stage 1: diverged");
  EXPECT_EQ(fleet.Poll().status().message(), "stage 1: diverged");
}

TEST_F(FleetControlTest, CheckpointsGoOutAndComeBackWholeAndChecked) {
  // Three pieces and a bit: pieces are 1 MiB.
  std::string bytes((3 << 20) + 5, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  servers_["a:1"].checkpoint = bytes;
  StageFleet fleet("job-1", {"a:1"}, connect());
  const std::filesystem::path file = dir_ / "in" / "stage-0.pt";
  absl::StatusOr<petra::v1::CheckpointResponse> written =
      fleet.WriteCheckpoint(0, petra::v1::CheckpointRequest());
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<std::string> sha = fleet.PullCheckpoint(0, *written, file);
  ASSERT_TRUE(sha.ok()) << sha.status();
  EXPECT_EQ(*sha, base::Sha256Hex(bytes));
  EXPECT_EQ(*base::Sha256OfFile(file), *sha);
  EXPECT_FALSE(std::filesystem::exists(file.string() + ".tmp"));
  absl::StatusOr<petra::v1::RestoreCheckpointResponse> restored =
      fleet.PushCheckpoint(0, file);
  ASSERT_TRUE(restored.ok());
  EXPECT_TRUE(restored->restored());
  EXPECT_EQ(servers_["a:1"].restored, bytes);
  EXPECT_EQ(servers_["a:1"].restore_pieces, 4);
  EXPECT_EQ(fleet.PushCheckpoint(0, dir_ / "none.pt").status().message(),
            "none.pt is missing");
}

// At most so many calls at once, every stage once, the first error in
// stage order.
TEST_F(FleetControlTest, ForEachRunsEveryStageOnceAtMostSoManyAtOnce) {
  for (int at_most : {0, 1, 3}) {
    std::mutex mu;
    int running = 0, most = 0;
    std::vector<int> calls(10);
    absl::Status s = StageFleet::ForEach(
        10,
        [&](int j) {
          {
            std::lock_guard<std::mutex> lock(mu);
            most = std::max(most, ++running);
            ++calls[j];
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          std::lock_guard<std::mutex> lock(mu);
          --running;
          return j == 4 || j == 7 ? absl::InternalError(absl::StrCat(j))
                                  : absl::OkStatus();
        },
        at_most);
    EXPECT_EQ(s.message(), "4");
    EXPECT_EQ(calls, std::vector<int>(10, 1));
    EXPECT_LE(most, at_most == 0 ? 10 : at_most);
    if (at_most == 1) {
      EXPECT_EQ(most, 1);
    }
  }
}

// A stage whose file changes between its checksum and the read: refused.
TEST_F(FleetControlTest, ACheckpointReadBackDifferentlyIsDataLoss) {
  class Torn : public FakeClient {
   public:
    using FakeClient::FakeClient;
    absl::Status ReadCheckpoint(
        const petra::v1::ReadCheckpointRequest& r,
        petra::v1::ReadCheckpointResponse* out) override {
      FakeClient::ReadCheckpoint(r, out).IgnoreError();
      if (r.offset() == 0) out->set_data("XYZ");
      return absl::OkStatus();
    }
  };
  servers_["a:1"].checkpoint = "0123456789";
  StageFleet fleet("job-1", {"a:1"}, [this](const std::string& a) {
    return std::make_unique<Torn>(servers_[a]);
  });
  const std::filesystem::path file = dir_ / "stage-0.pt";
  absl::Status s =
      fleet.PullCheckpoint(0, *fleet.WriteCheckpoint(0, {}), file).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("stage 0 (a:1): checkpoint read back with SHA-256"));
  // Nothing is left where the file would have been.
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_FALSE(std::filesystem::exists(file.string() + ".tmp"));
}

}  // namespace
}  // namespace petra::coordinator

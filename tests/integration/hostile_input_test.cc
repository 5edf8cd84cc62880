// Hostile input against the real servers, as a stranger on the network
// would send it: every RPC of every service called without credentials,
// with garbage for a request and with oversized headers; calls opened and
// never written; data streams without a job's data key during a job. The
// servers refuse each, stay up and answer health checks, keep their memory
// bounded, and a job under attack trains as an undisturbed one, loss for
// loss. (The coordinator's restart and the stage's Assign ranges have
// tests of their own: membership_test, bad_input_test.)
#include <grpcpp/generic/generic_stub.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "google/protobuf/util/json_util.h"
#include "petra/v1/access.pb.h"
#include "services/wire/data_key.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/probes.h"
#include "tests/integration/test_messages.h"
#include "tests/support/raw_call.h"

namespace petra::testing {
namespace {

using ::testing::HasSubstr;

// Every RPC the servers serve, by full method name.
const std::vector<std::string>& CoordinatorMethods() {
  static const std::vector<std::string> m = {
      "/petra.v1.CoordinatorService/SubmitJob",
      "/petra.v1.CoordinatorService/GetJob",
      "/petra.v1.CoordinatorService/WatchJob",
      "/petra.v1.CoordinatorService/ListJobs",
      "/petra.v1.CoordinatorService/CancelJob",
      "/petra.v1.CoordinatorService/ExportJob",
      "/petra.v1.CoordinatorService/ListServers",
      "/petra.v1.FleetService/Register",
      "/petra.v1.FleetService/Leave"};
  return m;
}
const std::vector<std::string>& StageMethods() {
  static const std::vector<std::string> m = {
      "/petra.v1.StageService/Assign",
      "/petra.v1.StageService/Start",
      "/petra.v1.StageService/Checkpoint",
      "/petra.v1.StageService/ReadCheckpoint",
      "/petra.v1.StageService/RestoreCheckpoint",
      "/petra.v1.StageService/Release",
      "/petra.v1.StageService/GetStatus",
      "/petra.v1.StageService/Forward",
      "/petra.v1.StageService/Backward",
      "/petra.v1.BulkService/Push"};
  return m;
}

grpc::Status Call(
    const std::string& address, const std::string& method,
    const std::string& request,
    const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  grpc::GenericStub stub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  RawCall call(stub, method, {request}, headers, std::chrono::seconds(30));
  return call.Wait();
}

// Resident memory of process `pid`, in bytes (0 when unknown).
int64_t Rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stoll(line.substr(6)) * 1024;
    }
  }
  return 0;
}

class HostileInput : public FleetProcesses {
 protected:
  // Every file under the test's directory but its servers' state
  // directories (the servers are given absolute paths only).
  std::set<std::string> FilesOutsideStateDirs() {
    namespace fs = std::filesystem;
    std::set<std::string> out;
    for (auto it = fs::recursive_directory_iterator(dir_.path());
         it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (it->is_directory() &&
          (name == "coordinator" || name.rfind("stage-", 0) == 0)) {
        it.disable_recursion_pending();
        continue;
      }
      out.insert(it->path().string());
    }
    return out;
  }

  // The value of the sample of `metric` (the whole series name, labels
  // included) on /metrics at `port`; -1 when absent.
  static double Sample(int port, const std::string& series) {
    const std::string body = HttpGet(port, "/metrics");
    const size_t at = body.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(body.substr(at + series.size() + 2));
  }
};

// A stranger's micro-batches while a job trains, on every stage and every
// data stream, with no key and with wrong ones: each stream ends
// UNAUTHENTICATED before a credit, the job's losses are those of the same
// job undisturbed, row for row, and each refusal is counted. (Once an
// anonymous [1,1,2,2] micro-batch was trained on, and one with the wrong
// channel count failed the job.)
TEST_F(HostileInput,
       StrangersMicroBatchesAreRefusedAndTheJobTrainsUndisturbed) {
  ASSERT_NO_FATAL_FAILURE(StartStages(2, {"--metrics-listen", "127.0.0.1:0"}));
  std::vector<int> metrics_ports;
  for (const auto& s : stages_) {
    metrics_ports.push_back(
        NumberAfter(s->WaitForLine("metrics on port"), "metrics on port "));
    ASSERT_GT(metrics_ports.back(), 0);
  }
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const std::string undisturbed = Submit(SmallJob(2));
  ASSERT_EQ(WaitForTheEnd(undisturbed, std::chrono::seconds(180)).state(),
            petra::v1::JOB_STATE_SUCCEEDED);

  const std::string id = Submit(SmallJob(2));
  ASSERT_TRUE(WaitForStatus(id, "JOB_STATE_RUNNING", std::chrono::seconds(60)));
  // The stranger's micro-batch: a [1,1,2,2] input for the job, from the
  // coordinator's place, or a gradient from stage 1's.
  petra::v1::ForwardMessage forward;
  forward.set_job_id(id);
  forward.set_sender_stage(-1);
  forward.set_phase(petra::v1::PHASE_TRAIN);
  forward.set_last_part(true);
  petra::v1::Tensor* x = forward.mutable_activation()->mutable_first();
  x->set_dtype(petra::v1::DTYPE_FLOAT32);
  for (int64_t d : {1, 1, 2, 2}) x->add_shape(d);
  x->set_data(std::string(4 * sizeof(float), '\1'));
  petra::v1::BackwardMessage backward;
  backward.set_job_id(id);
  backward.set_sender_stage(1);
  backward.set_last_part(true);
  *backward.mutable_activation() = forward.activation();
  *backward.mutable_gradient() = forward.activation();
  std::atomic<bool> over{false};
  std::atomic<int> refused{0}, other{0};
  std::vector<std::string> surprises;
  std::mutex mu;
  std::thread stranger([&] {
    uint64_t n = 0;
    while (!over) {
      for (const std::string& address : stage_addresses_) {
        for (const char* method : {"/petra.v1.StageService/Forward",
                                   "/petra.v1.StageService/Backward"}) {
          const bool up =
              std::string(method).find("Forward") != std::string::npos;
          forward.set_micro_batch_id(n);
          backward.set_micro_batch_id(n);
          ++n;
          std::vector<std::pair<std::string, std::string>> headers;
          // No key, a key of the right form but drawn here, and garbage.
          switch (n % 3) {
            case 1:
              headers.push_back({wire::kDataKeyHeader, kTestDataKey});
              break;
            case 2:
              headers.push_back({wire::kDataKeyHeader, "not-a-key"});
              break;
            default:
              break;
          }
          const grpc::Status s = Call(
              address, method,
              up ? forward.SerializeAsString() : backward.SerializeAsString(),
              headers);
          if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
            ++refused;
          } else {
            ++other;
            std::lock_guard<std::mutex> lock(mu);
            surprises.push_back(std::to_string(s.error_code()) + " " +
                                s.error_message());
          }
        }
      }
    }
  });
  const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(180));
  over = true;
  stranger.join();
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  EXPECT_EQ(done.recoveries_size(), 0);
  EXPECT_GT(refused.load(), 8);
  EXPECT_EQ(other.load(), 0) << (surprises.empty() ? "" : surprises.front());
  const auto calm = Losses(undisturbed);
  const auto attacked = Losses(id);
  ASSERT_EQ(calm.size(), attacked.size());
  for (const auto& [key, loss] : calm) {
    ASSERT_TRUE(attacked.count(key))
        << "epoch " << key.first << " micro-batch " << key.second;
    EXPECT_NEAR(attacked.at(key), loss, 1e-5 * std::max(1.0, std::abs(loss)))
        << "epoch " << key.first << " micro-batch " << key.second;
  }
  double counted = 0;
  for (int port : metrics_ports) {
    for (const char* stream : {"forward", "backward"}) {
      counted += std::max(
          0.0,
          Sample(port, std::string("petra_stage_data_refused_total{"
                                   "reason=\"unauthenticated\",stream=\"") +
                           stream + "\"}"));
    }
  }
  EXPECT_EQ(counted, refused.load());
}

// Every RPC of every service, from a stranger: no credentials, garbage for
// a request, a header past the servers' limit, and calls opened and left
// quiet. Each is refused (or, for the calls open to all, answered), the
// servers stay up and healthy throughout, their memory stays bounded, they
// write nothing outside their state directories, and the coordinator's
// audit log has a line for each refusal its code saw.
TEST_F(HostileInput, EveryRpcRefusesStrangersAndGarbageAndTheServersStayUp) {
  const std::string token_file = dir_.path() + "/fleet-token";
  std::ofstream(token_file) << "fleet-token-0123456789\n";
  const std::string users = dir_.path() + "/users.txtpb";
  std::ofstream(users) << "users { name: \"ada\" role: ROLE_ADMIN token: "
                          "\"ada-token-0123456789\" }\n";
  ASSERT_NO_FATAL_FAILURE(StartStages(1, {"--fleet-token-file", token_file}));
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      5, {"--fleet-token-file", token_file, "--users-file", users}));
  const std::vector<std::pair<std::string, const std::vector<std::string>*>>
      servers = {{address_, &CoordinatorMethods()},
                 {stage_addresses_[0], &StageMethods()}};
  const std::vector<pid_t> pids = {coordinator_->pid(), stages_[0]->pid()};
  std::vector<int64_t> rss_before;
  for (pid_t p : pids) rss_before.push_back(Rss(p));
  // What is outside the state directories now: the test's own files.
  const std::set<std::string> outside_before = FilesOutsideStateDirs();

  std::mt19937 random(11);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(random());
  const std::string big_header(64 << 10, 'x');
  int coordinator_refusals = 0;
  for (const auto& [address, methods] : servers) {
    for (const std::string& method : *methods) {
      // GetStatus is open to all, and its empty request may parse from
      // anything.
      const bool open_to_all = method == "/petra.v1.StageService/GetStatus";
      for (const std::string& request : {std::string(), garbage}) {
        const grpc::Status s = Call(address, method, request);
        if (!open_to_all) {
          EXPECT_FALSE(s.ok()) << method << " took "
                               << (request.empty() ? "nothing" : "garbage");
        }
        if (address == address_ && !s.ok()) ++coordinator_refusals;
      }
      // A header past the limit: refused before our code sees it.
      EXPECT_FALSE(Call(address, method, "", {{"x-padding", big_header}}).ok())
          << method;
      EXPECT_EQ(HealthCheck(address), 1) << "after " << method;
    }
  }
  // The refusals the coordinator's code saw are in its audit log (those of
  // gRPC's own, an unparsable request or a header past the limit, never
  // reach it).
  std::set<std::string> audited;
  for (int tries = 0; tries < 100; ++tries) {
    audited.clear();
    std::ifstream in(dir_.path() + "/coordinator/audit.log");
    for (std::string line; std::getline(in, line);) {
      petra::v1::AuditRecord r;
      ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &r).ok())
          << line;
      if (r.code() == "UNAUTHENTICATED") audited.insert(r.call());
    }
    if (audited.size() >= 7) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const char* call : {"SubmitJob", "GetJob", "WatchJob", "ListJobs",
                           "CancelJob", "ExportJob", "ListServers"}) {
    EXPECT_EQ(audited.count(call), 1u) << call << " was not audited";
  }
  EXPECT_GT(coordinator_refusals, 0);

  // Calls opened and left quiet, 20 of each streaming RPC: the servers
  // answer everyone else meanwhile.
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::unique_ptr<RawCall>> quiet;
  for (const auto& [address, methods] : servers) {
    stubs.push_back(std::make_unique<grpc::GenericStub>(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
    for (const std::string& method : *methods) {
      const bool streams = method.find("Watch") != std::string::npos ||
                           method.find("Export") != std::string::npos ||
                           method.find("Forward") != std::string::npos ||
                           method.find("Backward") != std::string::npos ||
                           method.find("Push") != std::string::npos;
      if (!streams) continue;
      for (int i = 0; i < 20; ++i) {
        quiet.push_back(std::make_unique<RawCall>(
            *stubs.back(), method, std::vector<std::string>{},
            RawCall::Headers{}, std::chrono::seconds(60), /*quiet=*/true));
      }
    }
  }
  for (const auto& [address, methods] : servers) {
    const auto start = Clock::now();
    EXPECT_EQ(HealthCheck(address), 1);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(2)) << address;
  }
  for (auto& call : quiet) call->Cancel();
  for (auto& call : quiet) call->Wait();

  // Up, and within 64 MiB of where they started.
  for (size_t i = 0; i < pids.size(); ++i) {
    EXPECT_EQ(kill(pids[i], 0), 0);
    EXPECT_LT(Rss(pids[i]) - rss_before[i], int64_t{64} << 20)
        << "process " << i << " grew from " << rss_before[i];
  }
  EXPECT_TRUE(coordinator_->Running());
  EXPECT_TRUE(stages_[0]->Running());
  EXPECT_EQ(FilesOutsideStateDirs(), outside_before);
}

// A key holder's stream past --max-stream-bytes: the micro-batch's parts
// are kept up to the limit, then the stream ends RESOURCE_EXHAUSTED naming
// the flag, the bytes go, and the server takes the next stream.
TEST_F(HostileInput, AStreamPastItsByteLimitEndsNamingTheLimit) {
  ASSERT_NO_FATAL_FAILURE(StartStages(
      1, {"--max-stream-bytes", "1048576", "--metrics-listen", "127.0.0.1:0"}));
  const int metrics_port = NumberAfter(
      stages_[0]->WaitForLine("metrics on port"), "metrics on port ");
  auto stub = petra::v1::StageService::NewStub(grpc::CreateChannel(
      stage_addresses_[0], grpc::InsecureChannelCredentials()));
  const petra::v1::AssignRequest assign = JobSevenOnOneStage();
  {
    grpc::ClientContext c;
    petra::v1::AssignResponse r;
    grpc::Status s = stub->Assign(&c, assign, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    grpc::ClientContext c2;
    petra::v1::StartRequest start;
    start.set_job_id("job-7");
    start.set_phase(petra::v1::PHASE_EVAL);
    start.set_epoch(1);
    start.set_micro_batches(2);
    petra::v1::StartResponse started;
    ASSERT_TRUE(stub->Start(&c2, start, &started).ok());
  }
  // A 4 MiB tensor in parts of 512 KiB: the third part is past 1 MiB.
  petra::v1::ForwardMessage part = ImagesWithLabels(0, petra::v1::PHASE_EVAL);
  part.clear_labels();
  part.set_last_part(false);
  petra::v1::Tensor* x = part.mutable_activation()->mutable_first();
  x->clear_shape();
  for (int64_t d : {1024, 1, 32, 32}) x->add_shape(d);
  x->mutable_chunk()->set_total_bytes(4 << 20);
  x->set_data(std::string(512 << 10, '\0'));
  grpc::ClientContext context;
  auto stream = stub->Forward(Keyed(&context));
  for (int i = 0; i < 8; ++i) {
    x->mutable_chunk()->set_offset(static_cast<uint64_t>(i) * (512 << 10));
    if (!stream->Write(part)) break;
  }
  stream->WritesDone();
  petra::v1::StreamReply reply;
  while (stream->Read(&reply)) {
  }
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-stream-bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("1048576"));
  EXPECT_EQ(Sample(metrics_port,
                   "petra_stage_data_refused_total{reason="
                   "\"over_limit\",stream=\"forward\"}"),
            1);
  // The server goes on: the whole micro-batches of the pass are taken.
  grpc::ClientContext again;
  auto next = stub->Forward(Keyed(&again));
  for (uint64_t id : {0, 1}) {
    petra::v1::StreamReply r =
        Exchange(*next, ImagesWithLabels(id, petra::v1::PHASE_EVAL));
    EXPECT_TRUE(r.has_done()) << r.DebugString();
  }
  next->WritesDone();
  EXPECT_TRUE(next->Finish().ok());
}

}  // namespace
}  // namespace petra::testing

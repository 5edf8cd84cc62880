// Structured fuzzing of every service's requests through the servers' own
// handlers, in this process: a stage server and a coordinator that lists it
// start once on loopback ports, and each input picks an RPC, mutates a
// valid request of it (proto_mutator.h) and sends it, as a stranger or as
// the job's own peer (data streams present the data key of the job this
// fuzzer assigned). Whatever the request, each call must end, with any
// status, within its deadline, and both servers must still answer a health
// check: a crash, a sanitizer report, a hang or a server that stops
// answering is a finding.
//
// Built two ways (tests/fuzz/CMakeLists.txt): with libFuzzer, ASan and
// UBSan in the fuzz build (`bash scripts/fuzz.sh --services`), and as a
// plain program in the main build that feeds it random inputs for a while
// (service_requests_main.cc; CI runs it briefly).
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator_server.h"
#include "petra/v1/bulk.pb.h"
#include "petra/v1/coordinator.pb.h"
#include "petra/v1/membership.pb.h"
#include "petra/v1/stage.pb.h"
#include "services/base/event_log.h"
#include "services/base/paths.h"
#include "services/base/secret_key.h"
#include "services/wire/data_key.h"
#include "stage_server/stage_server.h"
#include "tests/fuzz/proto_mutator.h"
#include "tests/support/raw_call.h"

namespace petra::fuzz {
namespace {

using google::protobuf::Message;
using Headers = testing::RawCall::Headers;

constexpr char kJob[] = "fuzz-job";
// Long enough for a stage that builds a model the spec allows; a call that
// takes longer is a hang.
constexpr auto kDeadline = std::chrono::seconds(60);

// The RPC of the input being run, for the report of a finding.
std::string current;

void Expect(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "service fuzz: %s (after an input of %s)\n",
                 what.c_str(), current.c_str());
    std::abort();
  }
}

// Calls of any RPC with a deadline: a call that takes longer is a hang.
class Call : public testing::RawCall {
 public:
  Call(grpc::GenericStub& stub, const std::string& method,
       const std::vector<std::string>& messages, const Headers& headers)
      : RawCall(stub, method, messages, headers, kDeadline) {}
};

// A valid request of each RPC, and where it goes.
struct Rpc {
  const char* method;
  bool to_stage;
  bool stream;  // several messages; a data stream presents the key
  std::unique_ptr<Message> seed;
};

petra::v1::JobSpec SmallSpec(int stages) {
  petra::v1::JobSpec spec;
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  spec.mutable_model()->set_width(0.125);
  spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_train_size(64);
  spec.mutable_dataset()->set_synthetic_test_size(32);
  spec.mutable_partition()->set_stage_count(stages);
  spec.mutable_training()->set_epochs(1);
  return spec;
}

petra::v1::Tensor Floats(std::vector<int64_t> shape) {
  petra::v1::Tensor t;
  t.set_dtype(petra::v1::DTYPE_FLOAT32);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_data(std::string(static_cast<size_t>(n) * sizeof(float), '\0'));
  return t;
}

std::vector<Rpc> Rpcs(const std::string& key) {
  std::vector<Rpc> out;
  auto add = [&](const char* method, bool to_stage, bool stream, Message* m) {
    out.push_back({method, to_stage, stream, std::unique_ptr<Message>(m)});
  };
  auto* assign = new petra::v1::AssignRequest;
  assign->set_job_id(kJob);
  *assign->mutable_spec() = SmallSpec(1);
  assign->set_stage_count(1);
  assign->mutable_layers()->set_end(10);
  assign->add_partition()->set_end(10);
  assign->set_steps_per_epoch(4);
  assign->set_data_key(key);
  add("/petra.v1.StageService/Assign", true, false, assign);
  auto* start = new petra::v1::StartRequest;
  start->set_job_id(kJob);
  start->set_phase(petra::v1::PHASE_EVAL);
  start->set_epoch(1);
  start->set_micro_batches(2);
  add("/petra.v1.StageService/Start", true, false, start);
  auto* checkpoint = new petra::v1::CheckpointRequest;
  checkpoint->set_job_id(kJob);
  checkpoint->set_name("epoch-1");
  add("/petra.v1.StageService/Checkpoint", true, false, checkpoint);
  auto* read = new petra::v1::ReadCheckpointRequest;
  read->set_job_id(kJob);
  read->set_path(std::string(kJob) + "/epoch-1/stage-0.pt");
  add("/petra.v1.StageService/ReadCheckpoint", true, false, read);
  auto* restore = new petra::v1::RestoreCheckpointRequest;
  restore->set_job_id(kJob);
  restore->set_data("PK\x03\x04");
  restore->set_total_bytes(4);
  add("/petra.v1.StageService/RestoreCheckpoint", true, false, restore);
  auto* release = new petra::v1::ReleaseRequest;
  release->set_job_id(kJob);
  add("/petra.v1.StageService/Release", true, false, release);
  add("/petra.v1.StageService/GetStatus", true, false,
      new petra::v1::GetStatusRequest);
  auto* forward = new petra::v1::ForwardMessage;
  forward->set_job_id(kJob);
  forward->set_phase(petra::v1::PHASE_EVAL);
  forward->set_sender_stage(-1);
  forward->set_last_part(true);
  forward->set_epoch(1);
  *forward->mutable_activation()->mutable_first() = Floats({4, 1, 28, 28});
  petra::v1::Tensor* labels = forward->mutable_labels();
  labels->set_dtype(petra::v1::DTYPE_INT64);
  labels->add_shape(4);
  labels->set_data(std::string(4 * sizeof(int64_t), '\0'));
  add("/petra.v1.StageService/Forward", true, true, forward);
  auto* backward = new petra::v1::BackwardMessage;
  backward->set_job_id(kJob);
  backward->set_sender_stage(1);
  backward->set_last_part(true);
  *backward->mutable_activation()->mutable_first() = Floats({4, 2});
  *backward->mutable_gradient()->mutable_first() = Floats({4, 2});
  add("/petra.v1.StageService/Backward", true, true, backward);
  auto* frame = new petra::v1::BulkFrame;
  frame->set_link(7);
  frame->set_total_bytes(16);
  frame->set_payload_bytes(16);
  frame->set_data(std::string(16, '\0'));
  add("/petra.v1.BulkService/Push", true, true, frame);

  auto* submit = new petra::v1::SubmitJobRequest;
  *submit->mutable_spec() = SmallSpec(1);
  add("/petra.v1.CoordinatorService/SubmitJob", false, false, submit);
  auto* get = new petra::v1::GetJobRequest;
  get->set_job_id("job-1");
  add("/petra.v1.CoordinatorService/GetJob", false, false, get);
  auto* watch = new petra::v1::WatchJobRequest;
  watch->set_job_id("job-1");
  add("/petra.v1.CoordinatorService/WatchJob", false, false, watch);
  add("/petra.v1.CoordinatorService/ListJobs", false, false,
      new petra::v1::ListJobsRequest);
  auto* cancel = new petra::v1::CancelJobRequest;
  cancel->set_job_id("job-1");
  add("/petra.v1.CoordinatorService/CancelJob", false, false, cancel);
  auto* exported = new petra::v1::ExportJobRequest;
  exported->set_job_id("job-1");
  add("/petra.v1.CoordinatorService/ExportJob", false, false, exported);
  add("/petra.v1.CoordinatorService/ListServers", false, false,
      new petra::v1::ListServersRequest);
  auto* join = new petra::v1::RegisterRequest;
  join->set_address("127.0.0.1:1");
  add("/petra.v1.FleetService/Register", false, false, join);
  auto* leave = new petra::v1::LeaveRequest;
  leave->set_address("127.0.0.1:1");
  add("/petra.v1.FleetService/Leave", false, false, leave);
  return out;
}

// The two servers, started once for the process.
class Servers {
 public:
  static Servers& Get() {
    static Servers* const servers = new Servers();
    return *servers;
  }

  grpc::GenericStub& stub(bool stage) {
    return stage ? *stage_ : *coordinator_;
  }
  const std::string& key() const { return key_; }
  const std::vector<Rpc>& rpcs() const { return rpcs_; }

  // Stops both and removes their state directories.
  void Stop() {
    coordinator_server_->GracefulStop();
    stage_server_->GracefulStop();
    base::RemoveTree(dir_).IgnoreError();
  }

  // Both answer; the stage server is let go of any job the input gave it.
  void Check() {
    for (bool stage : {true, false}) {
      Call health(stub(stage), "/grpc.health.v1.Health/Check", {""}, {});
      const grpc::Status s = health.Wait();
      Expect(s.ok(),
             std::string(stage ? "the stage server" : "the coordinator") +
                 " stopped answering: " + std::to_string(s.error_code()) + " " +
                 s.error_message());
    }
    Call get(stub(true), "/petra.v1.StageService/GetStatus", {""}, {});
    Expect(get.Wait().ok(), "GetStatus failed");
    // Whatever job it holds goes: the next input starts from idle (a job
    // the coordinator placed may hold it too; that is fine).
    for (const char* id : {kJob}) {
      petra::v1::ReleaseRequest r;
      r.set_job_id(id);
      Call release(stub(true), "/petra.v1.StageService/Release",
                   {r.SerializeAsString()}, {});
      release.Wait();
    }
  }

 private:
  Servers()
      : key_(base::NewSecretKey()),
        rpcs_(Rpcs(key_)),
        dir_(std::filesystem::temp_directory_path() /
             ("petra-service-fuzz-" + std::to_string(::getpid()))) {
    const std::filesystem::path& dir = dir_;
    // The servers' errors only; protobuf's complaints about the strings
    // that are not UTF-8 (sent on purpose) not at all.
    base::InitEventLog("petra_fuzz_services", /*to_stdout=*/false,
                       base::LogLevel::kError);
    google::protobuf::SetLogHandler(nullptr);
    stage_server::StageServer::Options s;
    s.listen = "127.0.0.1:0";
    s.metrics_listen = "";
    s.threads = 1;
    s.state_dir = (dir / "stage").string();
    auto stage = stage_server::StageServer::Create(s);
    Expect(stage.ok(), "the stage server does not start");
    stage_server_ = std::move(*stage);
    Expect(stage_server_->Start().ok(), "the stage server does not serve");
    const std::string stage_address =
        "127.0.0.1:" + std::to_string(stage_server_->port());
    coordinator::CoordinatorServer::Options c;
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "";
    c.stages = stage_address;
    c.state_dir = (dir / "coordinator").string();
    c.recovery_timeout_seconds = 0;
    auto coordinator = coordinator::CoordinatorServer::Create(c);
    Expect(coordinator.ok(), "the coordinator does not start");
    coordinator_server_ = std::move(*coordinator);
    Expect(coordinator_server_->Start().ok(), "the coordinator does not serve");
    stage_ = std::make_unique<grpc::GenericStub>(
        grpc::CreateChannel(stage_address, grpc::InsecureChannelCredentials()));
    coordinator_ = std::make_unique<grpc::GenericStub>(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(coordinator_server_->port()),
        grpc::InsecureChannelCredentials()));
  }

  const std::string key_;
  const std::vector<Rpc> rpcs_;
  const std::filesystem::path dir_;
  std::unique_ptr<stage_server::StageServer> stage_server_;
  std::unique_ptr<coordinator::CoordinatorServer> coordinator_server_;
  std::unique_ptr<grpc::GenericStub> stage_, coordinator_;
};

}  // namespace

// One input: byte 0 picks the RPC, byte 1 whether the job is assigned
// first (so that its stream and control calls reach the handlers' depth)
// and whether a data stream presents the key; the rest steers the
// mutations of up to three messages.
void RunOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return;
  Servers& servers = Servers::Get();
  const std::vector<Rpc>& rpcs = servers.rpcs();
  const Rpc& rpc = rpcs[data[0] % rpcs.size()];
  current = rpc.method;
  const bool assign_first = (data[1] & 1) != 0;
  const bool keyed = (data[1] & 2) == 0;
  FuzzBytes in(data + 2, size - 2);
  if (assign_first && rpc.to_stage) {
    Call assign(servers.stub(true), rpcs[0].method,
                {rpcs[0].seed->SerializeAsString()}, {});
    assign.Wait();
  }
  std::vector<std::string> messages;
  for (int k = 0; k < (rpc.stream ? 1 + static_cast<int>(in.Below(3)) : 1);
       ++k) {
    std::unique_ptr<Message> m(rpc.seed->New());
    m->CopyFrom(*rpc.seed);
    Mutate(m.get(), in, 1 + static_cast<int>(in.Below(4)));
    messages.push_back(m->SerializeAsString());
  }
  Headers headers;
  if (rpc.stream && keyed)
    headers.push_back({wire::kDataKeyHeader, servers.key()});
  Call call(servers.stub(rpc.to_stage), rpc.method, messages, headers);
  const grpc::Status s = call.Wait();
  Expect(s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED,
         "a call did not end within its deadline: " + s.error_message());
  // A job the coordinator accepted is cancelled at once: inputs do not
  // queue training.
  petra::v1::Job submitted;
  if (std::string(rpc.method).find("SubmitJob") != std::string::npos &&
      s.ok() && submitted.ParseFromString(call.first_reply())) {
    petra::v1::CancelJobRequest c;
    c.set_job_id(submitted.id());
    Call cancel(servers.stub(false), "/petra.v1.CoordinatorService/CancelJob",
                {c.SerializeAsString()}, {});
    cancel.Wait();
  }
  servers.Check();
}

void StopServers() { Servers::Get().Stop(); }

}  // namespace petra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  petra::fuzz::RunOneInput(data, size);
  return 0;
}

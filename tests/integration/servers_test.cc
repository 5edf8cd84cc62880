// The three binaries as a user runs them: --help, bad flags, servers on
// loopback ephemeral ports answering health, reflection, status and
// /metrics, and stopping cleanly on SIGTERM. The client's own commands
// (spec, model-info, train, version) are in petra_commands_test.cc.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "absl/strings/ascii.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "petra/v1/stage.grpc.pb.h"
#include "tests/integration/binaries.h"
#include "tests/integration/probes.h"
#include "tests/integration/subprocess.h"

namespace petra::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Help, EveryBinaryDescribesItsFlags) {
  struct Case {
    std::string binary;
    std::vector<std::string> flags;
  };
  for (const Case& c :
       std::vector<Case>{{kPetra, {"spec", "version"}},
                         {kPetraLocal, {"train", "profile"}},
                         {kStage,
                          {"--listen", "--metrics-listen", "--device",
                           "--threads", "--state-dir"}},
                         {kCoordinator,
                          {"--listen", "--metrics-listen", "--stages",
                           "--data-root", "--state-dir"}}}) {
    RunResult r = RunToExit(c.binary, {"--help"});
    EXPECT_EQ(r.exit_code, 0) << c.binary << "\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr("Usage:")) << c.binary;
    for (const std::string& f : c.flags) {
      EXPECT_THAT(r.out, HasSubstr(f)) << c.binary;
    }
    // The servers' help offers nothing they refuse, and names the others
    // by their binaries' names.
    if (c.binary == kStage || c.binary == kCoordinator) {
      EXPECT_THAT(r.out, HasSubstr("tls_server_config is refused"));
      EXPECT_EQ(r.out.find("petra-stage "), std::string::npos) << r.out;
    }
  }
  RunResult spec = RunToExit(kPetra, {"spec", "--help"});
  EXPECT_EQ(spec.exit_code, 0);
  for (const char* f :
       {"--arch", "--dataset", "--stages", "--mode", "--accumulation",
        "--micro-batch", "--epochs", "--lr", "--devices", "--seed"}) {
    EXPECT_THAT(spec.out, HasSubstr(f));
  }
  // --from names every format it reads, YAML too, in each command.
  for (const char* command : {"spec", "submit"}) {
    EXPECT_THAT(RunToExit(kPetra, {command, "--help"}).out,
                HasSubstr("YAML (.yaml, .yml)"))
        << command;
  }
  EXPECT_THAT(RunToExit(kPetraLocal, {"train", "--help"}).out,
              HasSubstr("YAML (.yaml, .yml)"));
}

// The "(default: X)" --help shows for --flag.
std::string DefaultShown(const std::string& help, const std::string& flag) {
  const size_t at = help.find("\n  --" + flag + " ");
  if (at == std::string::npos) return "(no --" + flag + ")";
  const std::string text = help.substr(at, help.find("\n  --", at + 1) - at);
  const size_t open = text.rfind("(default: ");
  if (open == std::string::npos) return "(no default shown)";
  return text.substr(open + 10, text.find(')', open) - open - 10);
}

// A new user read `petra train --help` (--epochs 1, --stages per-block,
// --seed 0) and got a job of 3 epochs, 2 stages and seed 1. The defaults
// each command shows are those of the job it builds without flags, which
// `petra spec` prints resolved.
TEST(Help, ShowsAsDefaultsTheJobACommandBuildsWithoutFlags) {
  RunResult job = RunToExit(kPetra, {"spec"});
  ASSERT_EQ(job.exit_code, 0) << job.err;
  for (const char* command : {"train", "submit", "spec", "profile"}) {
    RunResult help = RunToExit(kPetra, {command, "--help"});
    ASSERT_EQ(help.exit_code, 0) << command << help.err;
    EXPECT_THAT(
        job.out,
        HasSubstr("\"epochs\": " + DefaultShown(help.out, "epochs") + ","))
        << command;
    EXPECT_THAT(
        job.out,
        HasSubstr("\"stage_count\": " + DefaultShown(help.out, "stages") + ","))
        << command;
    EXPECT_THAT(job.out, HasSubstr("\"seed\": \"" +
                                   DefaultShown(help.out, "seed") + "\""))
        << command;
    EXPECT_THAT(job.out, HasSubstr("\"micro_batch_size\": " +
                                   DefaultShown(help.out, "micro-batch") + ","))
        << command;
    EXPECT_THAT(
        job.out,
        HasSubstr("\"architecture\": \"ARCHITECTURE_" +
                  absl::AsciiStrToUpper(DefaultShown(help.out, "arch")) + "\""))
        << command;
  }
}

TEST(BadUsage, IsExitCodeTwoWithTheReason) {
  RunResult r = RunToExit(kStage, {"--listne", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --listne"));
  EXPECT_THAT(r.err, HasSubstr("--help"));
  r = RunToExit(kStage, {"--threads", "two"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("flag --threads: bad value \"two\""));
  r = RunToExit(kCoordinator, {"extra"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unexpected argument 'extra'"));
  r = RunToExit(kPetra, {"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'"));
  r = RunToExit(kPetra, {});
  EXPECT_EQ(r.exit_code, 2);
}

// `petra` runs the fleet's commands itself, with no libtorch, and starts
// petra-local, beside it, for those that build networks: one that is not
// there is said so, and the fleet's commands still work.
TEST(BadUsage, PetraWithoutPetraLocalSaysWhatIsMissing) {
  TempDir dir;
  const std::string petra = dir.path() + "/petra";
  std::filesystem::copy_file(kPetra, petra);
  std::filesystem::permissions(petra, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
  RunResult r = RunToExit(petra, {"train", "--epochs", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("'train' runs in petra-local, which could not "
                               "be started from " +
                               dir.path() + "/petra-local"));
  r = RunToExit(petra, {"spec", "--epochs", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"epochs\": 2,"));
  // Beside its petra-local (the build's), the local commands run.
  r = RunToExit(kPetra, {"version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("compute: "));
}

// A stage server with no control lock (a fleet token or mutual TLS with the
// coordinator's identity) does not start unless told it is meant to be open,
// and then says so.
TEST(BadOptions, AStageServerWithoutAControlLockRefusesToStart) {
  TempDir dir;
  RunResult r =
      RunToExit(kStage, {"--listen", "127.0.0.1:0", "--metrics-listen", "",
                         "--state-dir", dir.path()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no --fleet-token-file or "
                               "--coordinator-identity: anyone who reaches "
                               "--listen could assign"));
  EXPECT_THAT(r.err, HasSubstr("or --insecure"));
  EXPECT_THAT(r.out, Not(HasSubstr("listening on port")));
  Subprocess open(kStage, {"--listen", "127.0.0.1:0", "--metrics-listen", "",
                           "--state-dir", dir.path(), "--insecure"});
  EXPECT_GT(NumberAfter(open.WaitForLine("listening on port"), "port "), 0);
  EXPECT_EQ(open.SignalAndWait(SIGTERM, std::chrono::seconds(30)), 0);
  EXPECT_THAT(open.err(), HasSubstr("warning: --insecure: no control lock"));
}

// A server asked to offer a data channel that does not exist says so and
// does not start.
TEST(BadOptions, AnUnknownTransportInTheEnvironmentIsRefused) {
  TempDir dir;
  for (const std::string& binary : {kStage, kCoordinator}) {
    std::vector<std::string> args = {
        "PETRA_TRANSPORTS=grpc,rdma", binary, "--listen",    "127.0.0.1:0",
        "--metrics-listen",           "",     "--state-dir", dir.path()};
    if (binary == kCoordinator) {
      args.insert(args.end(), {"--stages", "127.0.0.1:1"});
    }
    RunResult r = RunToExit("/usr/bin/env", args);
    EXPECT_EQ(r.exit_code, 1) << binary << r.out;
    EXPECT_THAT(
        r.err,
        HasSubstr("PETRA_TRANSPORTS=\"grpc,rdma\": \"rdma\" is not a "
                  "transport; use a list of grpc, grpc_bulk, shm and cuda_ipc"))
        << binary;
  }
}

TEST(BadOptions, AreRefusedBeforeServing) {
  TempDir dir;
  struct Case {
    std::string binary;
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {kStage,
            {"--listen", "localhost", "--state-dir", dir.path()},
            "--listen: \"localhost\" has no port"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--device", "tpu", "--state-dir",
             dir.path()},
            "--device: unknown device \"tpu\""},
           {kStage,
            {"--listen", "127.0.0.1:0", "--device", "cuda:0",
             "--metrics-listen", "", "--state-dir", dir.path()},
            "no CUDA"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--threads", "0", "--state-dir",
             dir.path()},
            "--threads: 0 is not in [1, 1024]"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--coordinator", "nohost"},
            "--coordinator: \"nohost\" has no port"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--advertise-address", "pod-0.petra-stage"},
            "--advertise-address without --coordinator"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--coordinator", "127.0.0.1:1", "--advertise-address",
             "pod-0:99999"},
            "--advertise-address: \"pod-0:99999\" is not host:port"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--state-dir", "/proc/petra"},
            "--state-dir: cannot create directory"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--max-stream-bytes", "4096"},
            "--max-stream-bytes: 4096 is less than 1 MiB (1048576)"},
           {kStage,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--max-receive-bytes", "-1"},
            "--max-receive-bytes: -1 is less than 1 MiB (1048576)"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--data-root", dir.path(), "--member-lease", "0"},
            "--member-lease = 0: must be between 1 and 3600 seconds"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--state-dir", dir.path(),
             "--data-root", dir.path(), "--stage-dns", "petra-stage"},
            "--stage-dns: \"petra-stage\" is not host:port"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--data-root", "/nonexistent"},
            "--data-root: \"/nonexistent\" is not an existing directory"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--recovery-timeout", "-1"},
            "--recovery-timeout = -1: must be between 0 and 604800"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--data-root", dir.path(), "--data-workers", "65"},
            "--data-workers: 65 is not in [0, 64] (0: one per core)"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--max-recoveries", "1001"},
            "--max-recoveries = 1001: must be between 0 and 1000"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--max-jobs-per-user", "-1"},
            "--max-jobs-per-user = -1: must be between 0 (no limit) and "
            "100000"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--cross-host-bandwidth", "0"},
            "--cross-host-bandwidth = 0: must be a number of bytes/s above "
            "0"},
           {kCoordinator,
            {"--listen", "127.0.0.1:0", "--stages", "a:1", "--state-dir",
             dir.path(), "--data-root", dir.path(), "--replica-store",
             "coordinator"},
            "--replica-store: \"coordinator\" has no port"}}) {
    RunResult r = RunToExit(c.binary, c.args);
    EXPECT_EQ(r.exit_code, 1) << c.expected << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.expected));
  }
}

class StageServerProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Subprocess>(
        kStage,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen",
                                 "127.0.0.1:0", "--state-dir",
                                 state_.path() + "/stage", "--insecure"});
    port_ = NumberAfter(server_->WaitForLine("listening on port"), "port ");
    ASSERT_GT(port_, 0) << server_->err();
    metrics_port_ =
        NumberAfter(server_->WaitForLine("metrics on port"), "port ");
    ASSERT_GT(metrics_port_, 0) << server_->err();
  }

  TempDir state_;
  std::unique_ptr<Subprocess> server_;
  int port_ = 0;
  int metrics_port_ = 0;
};

TEST_F(StageServerProcess, ServesHealthReflectionStatusAndMetrics) {
  EXPECT_EQ(HealthCheck(Loopback(port_)), 1);  // SERVING
  EXPECT_THAT(ReflectionListServices(Loopback(port_)),
              HasSubstr("petra.v1.StageService"));

  auto stub = petra::v1::StageService::NewStub(
      grpc::CreateChannel(Loopback(port_), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  petra::v1::StageStatus status;
  grpc::Status rpc = stub->GetStatus(&context, {}, &status);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  EXPECT_EQ(status.state(), petra::v1::StageStatus::STATE_IDLE);
  EXPECT_EQ(status.device(), "cpu");
  EXPECT_FALSE(status.version().empty());

  std::string metrics = HttpGet(metrics_port_, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("petra_build_info{"));
  EXPECT_THAT(metrics, HasSubstr("component=\"stage_server\""));
}

TEST_F(StageServerProcess, StateDirIsCreated) {
  EXPECT_TRUE(std::filesystem::is_directory(state_.path() + "/stage"));
}

TEST_F(StageServerProcess, StopsCleanlyOnSigterm) {
  EXPECT_EQ(server_->SignalAndWait(SIGTERM, std::chrono::seconds(10)), 0);
  EXPECT_THAT(server_->out(), HasSubstr("stopped"));
  // The port is free again.
  EXPECT_EQ(HealthCheck(Loopback(port_)), -1);
}

TEST_F(StageServerProcess, SecondServerOnTheSamePortFailsClearly) {
  TempDir other;
  RunResult r =
      RunToExit(kStage, {"--listen", Loopback(port_), "--metrics-listen", "",
                         "--state-dir", other.path(), "--insecure"});
  EXPECT_EQ(r.exit_code, 1);
  // One line, with the cause; not gRPC's raw error before it.
  EXPECT_THAT(r.err, HasSubstr("--listen: cannot listen on " + Loopback(port_) +
                               ": the address is in use"));
  EXPECT_THAT(r.err, Not(HasSubstr("No address added")));
  EXPECT_THAT(r.err, Not(HasSubstr("chttp2")));
}

class CoordinatorProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Subprocess>(
        kCoordinator,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen",
                                 "127.0.0.1:0", "--stages", "127.0.0.1:{1..2}",
                                 "--data-root", state_.path(), "--state-dir",
                                 state_.path() + "/coordinator"});
    port_ = NumberAfter(server_->WaitForLine("listening on port"), "port ");
    ASSERT_GT(port_, 0) << server_->err();
    stub_ = petra::v1::CoordinatorService::NewStub(grpc::CreateChannel(
        Loopback(port_), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Submit(const petra::v1::JobSpec& spec) {
    grpc::ClientContext context;
    petra::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    petra::v1::Job job;
    return stub_->SubmitJob(&context, request, &job);
  }

  TempDir state_;
  std::unique_ptr<Subprocess> server_;
  std::unique_ptr<petra::v1::CoordinatorService::Stub> stub_;
  int port_ = 0;
};

petra::v1::JobSpec RevNet18OnFashion() {
  petra::v1::JobSpec spec;
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  return spec;
}

TEST_F(CoordinatorProcess, BadSpecIsInvalidArgumentNamingTheField) {
  EXPECT_THAT(server_->out(), HasSubstr("(2 stage servers from --stages"));
  petra::v1::JobSpec spec = RevNet18OnFashion();
  spec.mutable_training()->set_accumulation_steps(0);
  grpc::Status s = Submit(spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("training.accumulation_steps = 0"));
}

TEST_F(CoordinatorProcess, JobLargerThanTheFleetIsRefused) {
  grpc::Status s = Submit(RevNet18OnFashion());  // 10 stages per block
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("needs 10 stage servers but the fleet has 2"));
}

// A job with replicas needs R x J servers: the refusal names the product,
// its factors and the shortfall.
TEST_F(CoordinatorProcess, AJobWithMoreReplicasThanServersIsRefused) {
  petra::v1::JobSpec spec = RevNet18OnFashion();
  spec.mutable_partition()->set_stage_count(2);
  spec.set_replicas(2);
  grpc::Status s = Submit(spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(
      s.error_message(),
      HasSubstr("needs 4 stage servers (2 replicas x 2 stages) but "
                "the fleet has 2 (--stages and registered servers): 2 short"));
}

// A dataset folder the coordinator does not have is refused at submission,
// not when the job starts (its --data-root here is an empty folder).
TEST_F(CoordinatorProcess, AMissingDatasetFolderIsRefusedAtSubmit) {
  petra::v1::JobSpec spec = RevNet18OnFashion();
  spec.mutable_partition()->set_stage_count(2);
  grpc::Status s = Submit(spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(),
              HasSubstr("dataset.path \"fashion-mnist\": \"" + state_.path() +
                        "/fashion-mnist\" is not a directory on the "
                        "coordinator"));
}

TEST_F(CoordinatorProcess, AnswersHealthReflectionAndQueries) {
  EXPECT_EQ(HealthCheck(Loopback(port_)), 1);
  EXPECT_THAT(ReflectionListServices(Loopback(port_)),
              HasSubstr("petra.v1.CoordinatorService"));
  grpc::ClientContext list_context;
  petra::v1::ListJobsResponse list;
  ASSERT_TRUE(stub_->ListJobs(&list_context, {}, &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  grpc::ClientContext get_context;
  petra::v1::GetJobRequest get;
  get.set_job_id("job-404");
  petra::v1::Job job;
  grpc::Status s = stub_->GetJob(&get_context, get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("job-404"));
  EXPECT_EQ(server_->SignalAndWait(SIGINT, std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace petra::testing

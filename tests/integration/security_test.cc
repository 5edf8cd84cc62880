// TLS, mutual TLS, the coordinator's bearer token and the stages' control
// identity, on a fleet of real processes. Certificates come from `openssl`
// at test time: a CA the fleet trusts, a second "wrong" CA, and a
// coordinator, stage and client certificate from each.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "petra/v1/coordinator.grpc.pb.h"
#include "petra/v1/membership.grpc.pb.h"
#include "petra/v1/stage.grpc.pb.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/transport_security.h"
#include "tests/integration/binaries.h"
#include "tests/integration/probes.h"
#include "tests/integration/subprocess.h"

namespace petra::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kOpenssl = "/usr/bin/openssl";
const std::string kToken = "s3cret-Token.for_tests";

// fleet_test.cc's small job: synthetic data, seconds to run.
const std::vector<std::string> kSmallJob = {
    "--arch",   "revnet18", "--width",  "0.125", "--dataset", "synthetic",
    "--stages", "2",        "--epochs", "1",     "--seed",    "3"};

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

void Openssl(const std::vector<std::string>& args) {
  RunResult r = RunToExit(kOpenssl, args);
  ASSERT_EQ(r.exit_code, 0) << "openssl " << args[0] << ":\n" << r.err;
}

// <dir>/<ca>/ca.crt and ca.key; then <dir>/<ca>/<name>.crt and .key with CN
// `name`, usable as server and client, valid for 127.0.0.1 and localhost.
void MakeCa(const std::string& dir) {
  std::filesystem::create_directories(dir);
  Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt",
           "ec_paramgen_curve:P-256", "-nodes", "-keyout", dir + "/ca.key",
           "-out", dir + "/ca.crt", "-days", "2", "-subj", "/CN=test-ca",
           "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
           "keyUsage=critical,keyCertSign,cRLSign"});
}

void MakeCertificate(const std::string& dir, const std::string& name) {
  const std::string base = dir + "/" + name;
  Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
           "-nodes", "-keyout", base + ".key", "-out", base + ".csr", "-subj",
           "/CN=" + name});
  WriteFile(base + ".ext",
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  Openssl({"x509", "-req", "-in", base + ".csr", "-CA", dir + "/ca.crt",
           "-CAkey", dir + "/ca.key", "-CAcreateserial", "-days", "2",
           "-extfile", base + ".ext", "-out", base + ".crt"});
}

class SecureFleet : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string ca : {"good", "wrong"}) {
      ASSERT_NO_FATAL_FAILURE(MakeCa(Pki(ca)));
      for (const char* name :
           {"petra-coordinator", "petra-stage", "petra-client"}) {
        ASSERT_NO_FATAL_FAILURE(MakeCertificate(Pki(ca), name));
      }
    }
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, kToken + "\n");
    WriteFile(dir_.path() + "/wrong-token", "not-the-token\n");
  }

  std::string Pki(const std::string& ca) const {
    return dir_.path() + "/" + ca;
  }
  // --tls-* flags with `name`'s certificate from `cert_ca`, trusting
  // `trust_ca`.
  std::vector<std::string> Tls(const std::string& name,
                               const std::string& cert_ca = "good",
                               const std::string& trust_ca = "good") const {
    return {"--tls-cert", Pki(cert_ca) + "/" + name + ".crt",
            "--tls-key",  Pki(cert_ca) + "/" + name + ".key",
            "--tls-ca",   Pki(trust_ca) + "/ca.crt"};
  }

  // Two mTLS stages that take control calls from petra-coordinator only,
  // and an mTLS coordinator that needs the token (and `coordinator_extra`).
  void StartFleet(const std::vector<std::string>& coordinator_extra = {}) {
    std::string list;
    for (int j = 0; j < 2; ++j) {
      std::vector<std::string> args = {
          "--listen",
          "127.0.0.1:0",
          "--metrics-listen",
          "",
          "--threads",
          "1",
          "--state-dir",
          dir_.path() + "/stage-" + std::to_string(j),
          "--coordinator-identity",
          "petra-coordinator"};
      for (const std::string& a : Tls("petra-stage")) args.push_back(a);
      stages_.push_back(std::make_unique<Subprocess>(kStage, args));
      const int port = NumberAfter(
          stages_.back()->WaitForLine("listening on port"), "port ");
      ASSERT_GT(port, 0) << stages_.back()->err();
      stage_addresses_.push_back(Loopback(port));
      list += (list.empty() ? "" : ",") + Loopback(port);
    }
    EXPECT_THAT(stages_[0]->WaitForLine("transport:"),
                HasSubstr("mutual TLS (identity petra-stage), control calls "
                          "only from \"petra-coordinator\""));
    std::vector<std::string> args = {
        "--listen",          "127.0.0.1:0",
        "--metrics-listen",  "",
        "--stages",          list,
        "--data-root",       "/usr/share/datasets",
        "--state-dir",       dir_.path() + "/coordinator",
        "--auth-token-file", token_file_};
    for (const std::string& a : Tls("petra-coordinator")) args.push_back(a);
    args.insert(args.end(), coordinator_extra.begin(), coordinator_extra.end());
    coordinator_ = std::make_unique<Subprocess>(kCoordinator, args);
    const int port =
        NumberAfter(coordinator_->WaitForLine("listening on port"), "port ");
    ASSERT_GT(port, 0) << coordinator_->err();
    address_ = Loopback(port);
    EXPECT_THAT(coordinator_->WaitForLine("transport:"),
                HasSubstr("mutual TLS (identity petra-coordinator), bearer "
                          "token required"));
  }

  // `petra COMMAND --coordinator ADDRESS extra... rest...`.
  RunResult Petra(const std::string& command,
                  const std::vector<std::string>& extra,
                  const std::vector<std::string>& rest = {},
                  std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::vector<std::string> args = {command, "--coordinator", address_};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), rest.begin(), rest.end());
    return RunToExit(kPetra, args, timeout);
  }
  std::vector<std::string> RightClient() const {
    std::vector<std::string> args = Tls("petra-client");
    args.push_back("--auth-token-file");
    args.push_back(token_file_);
    return args;
  }

  // A channel as the holder of `name`'s certificate from `ca`.
  std::shared_ptr<grpc::Channel> ChannelAs(const std::string& address,
                                           const std::string& name,
                                           const std::string& ca = "good",
                                           const std::string& token = "") {
    wire::TlsOptions o{Pki(ca) + "/" + name + ".crt",
                       Pki(ca) + "/" + name + ".key", Pki("good") + "/ca.crt"};
    absl::StatusOr<wire::TransportSecurity> s =
        wire::LoadTransportSecurity(o, wire::TlsRole::kClient);
    EXPECT_TRUE(s.ok()) << s.status();
    return wire::CreateChannel(address, s.ok() ? *s : wire::TransportSecurity(),
                               token);
  }

  static void Deadline(grpc::ClientContext& c) {
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  TempDir dir_;
  std::string token_file_;
  std::vector<std::unique_ptr<Subprocess>> stages_;
  std::vector<std::string> stage_addresses_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
};

TEST_F(SecureFleet, RightCredentialsRunAJobOverMutualTls) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  RunResult submit = Petra("submit", RightClient(), kSmallJob);
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_THAT(id, HasSubstr("job-"));
  RunResult watch =
      Petra("watch", RightClient(), {id}, std::chrono::seconds(300));
  EXPECT_EQ(watch.exit_code, 0)
      << watch.out << watch.err << coordinator_->err();
  EXPECT_THAT(watch.out, HasSubstr("succeeded"));
  // The token may come from the environment instead of a file.
  setenv("PETRA_AUTH_TOKEN", kToken.c_str(), 1);
  RunResult status = Petra("status", Tls("petra-client"), {id});
  unsetenv("PETRA_AUTH_TOKEN");
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("succeeded"));
  // Health checks need TLS but no token.
  RunResult health =
      RunToExit(kPetra, {"health", "--address", address_, "--tls-ca",
                         Pki("good") + "/ca.crt", "--tls-cert",
                         Pki("good") + "/petra-client.crt", "--tls-key",
                         Pki("good") + "/petra-client.key"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_THAT(health.out, HasSubstr("SERVING"));
}

TEST_F(SecureFleet, PlaintextClientsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  RunResult r = Petra("list", {"--auth-token-file", token_file_});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator"));
  EXPECT_THAT(r.err, HasSubstr("give --tls-ca"));
  // The health service too: it is behind the same TLS.
  EXPECT_EQ(HealthCheck(address_), -1);
  EXPECT_EQ(HealthCheck(stage_addresses_[0]), -1);
  RunResult health = RunToExit(kPetra, {"health", "--address", address_});
  EXPECT_EQ(health.exit_code, 1);
}

TEST_F(SecureFleet, ClientTrustingAnotherCaIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  std::vector<std::string> args = Tls("petra-client", "good", "wrong");
  args.insert(args.end(), {"--auth-token-file", token_file_});
  RunResult r = Petra("list", args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator"));
}

TEST_F(SecureFleet, ClientCertificateOfAnotherCaOrNoneIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  // Trusts the server, but its own certificate is signed by the wrong CA.
  std::vector<std::string> args = Tls("petra-client", "wrong", "good");
  args.insert(args.end(), {"--auth-token-file", token_file_});
  RunResult r = Petra("list", args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator"));
  // No client certificate at all.
  r = Petra("list", {"--tls-ca", Pki("good") + "/ca.crt", "--auth-token-file",
                     token_file_});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator"));
  // The control check: the same credentials with the right CA pass.
  r = Petra("list", RightClient());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no jobs"));
}

TEST_F(SecureFleet, WrongOrMissingTokenIsUnauthenticated) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  RunResult r = Petra("list", Tls("petra-client"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("requires a bearer token"));
  std::vector<std::string> wrong = Tls("petra-client");
  wrong.insert(wrong.end(),
               {"--auth-token-file", dir_.path() + "/wrong-token"});
  r = Petra("list", wrong);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("bearer token is not this coordinator's"));
  r = Petra("submit", wrong, kSmallJob);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("bearer token is not this coordinator's"));

  // The gRPC codes, unary and streaming.
  for (const std::string& token : {std::string(), std::string("nope")}) {
    auto stub = petra::v1::CoordinatorService::NewStub(
        ChannelAs(address_, "petra-client", "good", token));
    grpc::ClientContext list_context;
    Deadline(list_context);
    petra::v1::ListJobsResponse list;
    grpc::Status s = stub->ListJobs(&list_context, {}, &list);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    grpc::ClientContext watch_context;
    Deadline(watch_context);
    petra::v1::WatchJobRequest watch;
    watch.set_job_id("job-1");
    auto reader = stub->WatchJob(&watch_context, watch);
    petra::v1::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  auto stub = petra::v1::CoordinatorService::NewStub(
      ChannelAs(address_, "petra-client", "good", kToken));
  grpc::ClientContext context;
  Deadline(context);
  petra::v1::ListJobsResponse list;
  grpc::Status s = stub->ListJobs(&context, {}, &list);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(SecureFleet, StageControlCallsOnlyFromTheCoordinatorIdentity) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  for (const char* who : {"petra-client", "petra-stage"}) {
    auto stub =
        petra::v1::StageService::NewStub(ChannelAs(stage_addresses_[0], who));
    grpc::ClientContext assign_context;
    Deadline(assign_context);
    petra::v1::AssignRequest assign;
    assign.set_job_id("job-x");
    petra::v1::AssignResponse assigned;
    grpc::Status s = stub->Assign(&assign_context, assign, &assigned);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << who;
    EXPECT_THAT(s.error_message(),
                HasSubstr("only accepted from the coordinator (identity "
                          "\"petra-coordinator\")"));
    EXPECT_THAT(s.error_message(),
                HasSubstr(std::string("CN \"") + who + "\""));
    grpc::ClientContext release_context;
    Deadline(release_context);
    petra::v1::ReleaseRequest release;
    release.set_job_id("job-x");
    petra::v1::ReleaseResponse released;
    EXPECT_EQ(stub->Release(&release_context, release, &released).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    // Status is open to any verified peer.
    grpc::ClientContext status_context;
    Deadline(status_context);
    petra::v1::StageStatus status;
    EXPECT_TRUE(stub->GetStatus(&status_context, {}, &status).ok());
  }
  // A certificate of the CA is not enough for a data stream: without its
  // job's data key it ends before a credit is granted.
  auto stub = petra::v1::StageService::NewStub(
      ChannelAs(stage_addresses_[0], "petra-stage"));
  grpc::ClientContext stream_context;
  Deadline(stream_context);
  auto stream = stub->Forward(&stream_context);
  petra::v1::StreamReply reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The coordinator's identity passes the check (NOT_FOUND: no such job).
  auto as_coordinator = petra::v1::StageService::NewStub(
      ChannelAs(stage_addresses_[0], "petra-coordinator"));
  grpc::ClientContext release_context;
  Deadline(release_context);
  petra::v1::ReleaseRequest release;
  release.set_job_id("job-x");
  petra::v1::ReleaseResponse released;
  grpc::Status s =
      as_coordinator->Release(&release_context, release, &released);
  EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << s.error_message();
  // A coordinator certificate from the wrong CA never gets that far.
  auto impostor = petra::v1::StageService::NewStub(
      ChannelAs(stage_addresses_[0], "petra-coordinator", "wrong"));
  grpc::ClientContext impostor_context;
  Deadline(impostor_context);
  EXPECT_EQ(
      impostor->Release(&impostor_context, release, &released).error_code(),
      grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecureFleet, BadSecurityOptionsAreRefusedBeforeServing) {
  const std::string good = Pki("good");
  struct Case {
    std::string binary;
    std::vector<std::string> args;
    int code;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {kStage,
            {"--tls-cert", good + "/petra-stage.crt"},
            1,
            "--tls-cert is set but --tls-key is not"},
           {kStage,
            {"--tls-ca", good + "/ca.crt"},
            1,
            "--tls-ca on a server requires client certificates"},
           {kStage,
            {"--tls-cert", good + "/petra-stage.crt", "--tls-key",
             good + "/petra-stage.key", "--coordinator-identity", "x"},
            1,
            "--coordinator-identity needs mutual TLS"},
           {kStage,
            {"--tls-cert", good + "/petra-stage.crt", "--tls-key",
             good + "/petra-client.key"},
            1,
            "is not the private key of the certificate"},
           {kCoordinator,
            {"--stages", "127.0.0.1:1", "--data-root", dir_.path(),
             "--tls-cert", good + "/nope.crt", "--tls-key",
             good + "/petra-coordinator.key"},
            1,
            "--tls-cert: cannot read " + good + "/nope.crt"},
           {kCoordinator,
            {"--data-root", dir_.path(), "--stage-identity", "petra-stage"},
            1,
            "--stage-identity needs mutual TLS"},
           {kCoordinator,
            {"--stages", "127.0.0.1:1", "--data-root", dir_.path(),
             "--auth-token-file", dir_.path() + "/missing"},
            1,
            "--auth-token-file: cannot read"},
           {kPetra,
            {"list", "--tls-key", good + "/petra-client.key"},
            2,
            "--tls-key is set but --tls-cert is not"},
           {kPetra,
            {"list", "--tls-ca", good + "/petra-client.key"},
            2,
            "--tls-ca: \"" + good + "/petra-client.key\" holds no PEM"},
       }) {
    std::vector<std::string> args = c.args;
    if (c.binary != kPetra) {
      args.insert(args.end(), {"--listen", "127.0.0.1:0", "--metrics-listen",
                               "", "--state-dir", dir_.path() + "/state"});
    }
    RunResult r = RunToExit(c.binary, args);
    EXPECT_EQ(r.exit_code, c.code) << c.expected << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.expected));
    EXPECT_THAT(r.out, Not(HasSubstr("listening on port")));
  }
}

TEST(SecurityHelp, EveryProgramDescribesTheSecurityFlags) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> flags;
  };
  for (const Case& c : std::vector<Case>{
           {{kStage, "--help"},
            {"--tls-cert", "--tls-key", "--tls-ca", "--coordinator-identity"}},
           {{kCoordinator, "--help"},
            {"--tls-cert", "--tls-key", "--tls-ca", "--auth-token-file"}},
           {{kPetra, "submit", "--help"},
            {"--tls-cert", "--tls-key", "--tls-ca", "--auth-token-file",
             "PETRA_AUTH_TOKEN"}},
           {{kPetra, "watch", "--help"}, {"--tls-ca", "--auth-token-file"}},
           {{kPetra, "export", "--help"}, {"--tls-ca", "--auth-token-file"}},
           {{kPetra, "health", "--help"}, {"--tls-ca", "--tls-cert"}}}) {
    RunResult r = RunToExit(
        c.args[0], std::vector<std::string>(c.args.begin() + 1, c.args.end()));
    EXPECT_EQ(r.exit_code, 0) << c.args[0] << r.err;
    for (const std::string& f : c.flags) {
      EXPECT_THAT(r.out, HasSubstr(f)) << c.args[0] << " " << c.args[1];
    }
  }
}

// --stage-identity: only the stages' certificate may join the fleet; a
// client's, from the same CA, may not add an address jobs' data would go to.
TEST_F(SecureFleet, OnlyTheStagesCertificateRegisters) {
  ASSERT_NO_FATAL_FAILURE(StartFleet({"--stage-identity", "petra-stage"}));
  for (const std::string who : {"petra-client", "petra-stage"}) {
    SCOPED_TRACE(who);
    auto stub = petra::v1::FleetService::NewStub(ChannelAs(address_, who));
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::RegisterRequest request;
    request.set_address("127.0.0.1:1");
    petra::v1::RegisterResponse response;
    grpc::Status s = stub->Register(&c, request, &response);
    if (who == "petra-client") {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
      EXPECT_THAT(s.error_message(), HasSubstr("petra-stage"));
    } else {
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_TRUE(response.joined());
    }
  }
}

}  // namespace
}  // namespace petra::testing

// Users and roles on a real coordinator (--users-file): every role tries
// every control call over gRPC, a member cannot cancel or export another
// member's job, jobs record their owner (`petra list --mine`), and the
// audit log holds one line per call with who, what and the result. And
// stage servers that take control calls only with the fleet token.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "google/protobuf/util/json_util.h"
#include "petra/v1/access.pb.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/transport_security.h"
#include "tests/integration/fleet_fixture.h"

namespace petra::testing {
namespace {

using ::testing::HasSubstr;
using Stub = petra::v1::CoordinatorService::Stub;

const std::map<std::string, std::string> kTokens = {
    {"ada", "ada-token-0123456789"},
    {"bo", "bo-token-0123456789"},
    {"cy", "cy-token-0123456789"},
    {"vi", "vi-token-0123456789"}};

class Users : public FleetProcesses {
 protected:
  void SetUp() override {
    const std::string users = dir_.path() + "/users.txtpb";
    std::ofstream f(users);
    for (const auto& [name, token] : kTokens) {
      const char* role = name == "ada"  ? "ROLE_ADMIN"
                         : name == "vi" ? "ROLE_VIEWER"
                                        : "ROLE_MEMBER";
      f << "users { name: \"" << name << "\" role: " << role << " token: \""
        << token << "\" }\n";
    }
    f.close();
    ASSERT_NO_FATAL_FAILURE(StartStages(2));
    ASSERT_NO_FATAL_FAILURE(StartCoordinator(5, {"--users-file", users}));
  }

  std::unique_ptr<Stub> As(const std::string& user) {
    return petra::v1::CoordinatorService::NewStub(wire::CreateChannel(
        address_, wire::TransportSecurity(), kTokens.at(user)));
  }
  static void Deadline(grpc::ClientContext& c) {
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }

  grpc::Status Submit(const std::string& user, std::string* id,
                      int32_t priority = 0) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::SubmitJobRequest r;
    // Long enough to be running for the whole test; cancelled at its end.
    petra::v1::JobSpec* s = r.mutable_spec();
    s->mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
    s->mutable_model()->set_width(0.125);
    s->mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
    s->mutable_partition()->set_stage_count(2);
    s->mutable_training()->set_epochs(1000);
    s->set_priority(priority);
    petra::v1::Job job;
    grpc::Status status = As(user)->SubmitJob(&c, r, &job);
    if (id != nullptr) *id = job.id();
    return status;
  }
  grpc::Status Get(const std::string& user, const std::string& id) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::GetJobRequest r;
    r.set_job_id(id);
    petra::v1::Job job;
    return As(user)->GetJob(&c, r, &job);
  }
  grpc::Status List(const std::string& user, bool mine,
                    std::vector<std::string>* ids = nullptr) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::ListJobsRequest r;
    r.set_mine(mine);
    petra::v1::ListJobsResponse response;
    grpc::Status s = As(user)->ListJobs(&c, r, &response);
    for (const auto& j : response.jobs()) {
      if (ids != nullptr) ids->push_back(j.id() + ":" + j.owner());
    }
    return s;
  }
  grpc::Status Servers(const std::string& user) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::ListServersResponse response;
    return As(user)->ListServers(&c, petra::v1::ListServersRequest(),
                                 &response);
  }
  // The first event, then the stream is let go.
  grpc::Status Watch(const std::string& user, const std::string& id) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::WatchJobRequest r;
    r.set_job_id(id);
    auto reader = As(user)->WatchJob(&c, r);
    petra::v1::JobEvent event;
    if (reader->Read(&event)) {
      c.TryCancel();
      while (reader->Read(&event)) {
      }
      reader->Finish().IgnoreError();
      return grpc::Status::OK;
    }
    return reader->Finish();
  }
  grpc::Status Export(const std::string& user, const std::string& id) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::ExportJobRequest r;
    r.set_job_id(id);
    auto reader = As(user)->ExportJob(&c, r);
    petra::v1::ExportChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }
  grpc::Status Cancel(const std::string& user, const std::string& id) {
    grpc::ClientContext c;
    Deadline(c);
    petra::v1::CancelJobRequest r;
    r.set_job_id(id);
    petra::v1::Job job;
    return As(user)->CancelJob(&c, r, &job);
  }

  std::vector<petra::v1::AuditRecord> Audit(size_t at_least) {
    std::vector<petra::v1::AuditRecord> out;
    // Written by the coordinator's audit thread: a moment behind the reply.
    for (int tries = 0; tries < 100 && out.size() < at_least; ++tries) {
      if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      out.clear();
      std::ifstream in(dir_.path() + "/coordinator/audit.log");
      for (std::string line; std::getline(in, line);) {
        petra::v1::AuditRecord r;
        EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &r).ok())
            << line;
        out.push_back(r);
      }
    }
    return out;
  }
};

bool Denied(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

TEST_F(Users, EveryRoleTriesEveryCall) {
  std::string bo_job, cy_job, ada_job;
  ASSERT_TRUE(Submit("bo", &bo_job).ok());
  ASSERT_TRUE(Submit("cy", &cy_job).ok());
  ASSERT_TRUE(Submit("ada", &ada_job).ok());
  grpc::Status vi_submit = Submit("vi", nullptr);
  EXPECT_TRUE(Denied(vi_submit)) << vi_submit.error_message();
  EXPECT_THAT(vi_submit.error_message(),
              HasSubstr("user \"vi\" (viewer) may not SubmitJob"));
  // Ahead of the queue's default: admins only.
  grpc::Status raised = Submit("bo", nullptr, 3);
  EXPECT_TRUE(Denied(raised)) << raised.error_message();
  EXPECT_THAT(raised.error_message(),
              HasSubstr("user \"bo\" may not submit at priority 3"));

  // Reading: everyone.
  for (const std::string user : {"ada", "bo", "cy", "vi"}) {
    SCOPED_TRACE(user);
    EXPECT_TRUE(Get(user, bo_job).ok());
    EXPECT_TRUE(List(user, false).ok());
    EXPECT_TRUE(Watch(user, bo_job).ok());
    EXPECT_TRUE(Servers(user).ok());
  }
  // Owners, and --mine.
  std::vector<std::string> all, mine;
  ASSERT_TRUE(List("vi", false, &all).ok());
  EXPECT_THAT(all, ::testing::UnorderedElementsAre(
                       bo_job + ":bo", cy_job + ":cy", ada_job + ":ada"));
  ASSERT_TRUE(List("bo", true, &mine).ok());
  EXPECT_THAT(mine, ::testing::ElementsAre(bo_job + ":bo"));
  RunResult cli = Petra({"list", "--mine"});
  EXPECT_EQ(cli.exit_code, 1);  // no token: unauthenticated
  EXPECT_THAT(cli.err, HasSubstr("requires a bearer token"));

  // Another member's job, and a viewer: refused, naming user and action.
  grpc::Status s = Export("cy", bo_job);
  EXPECT_TRUE(Denied(s)) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr("user \"cy\" (member) may not ExportJob job \"" +
                        bo_job + "\" of user \"bo\""));
  EXPECT_TRUE(Denied(Export("vi", bo_job)));
  s = Cancel("cy", bo_job);
  EXPECT_TRUE(Denied(s)) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("may not CancelJob"));
  EXPECT_TRUE(Denied(Cancel("vi", bo_job)));
  // Its owner and an admin may: no checkpoint to export yet is another
  // answer than a refusal.
  EXPECT_FALSE(Denied(Export("bo", bo_job)));
  EXPECT_FALSE(Denied(Export("ada", bo_job)));
  EXPECT_TRUE(Cancel("bo", bo_job).ok());
  EXPECT_TRUE(Cancel("ada", cy_job).ok());
  EXPECT_TRUE(Cancel("ada", ada_job).ok());

  // The audit log: one line per call above (5 submits, 16 reads, 2 more
  // lists, the client's unauthenticated list, 4 exports, 5 cancels).
  const std::vector<petra::v1::AuditRecord> lines =
      Audit(5 + 16 + 2 + 1 + 4 + 5);
  ASSERT_EQ(lines.size(), 5u + 16 + 2 + 1 + 4 + 5);
  std::map<std::string, int> by;
  for (const auto& r : lines) {
    by[r.user() + " " + r.call() + " " + r.code()]++;
    EXPECT_THAT(r.peer(), HasSubstr("127.0.0.1"));
    EXPECT_GT(r.time().seconds(), 0);
  }
  EXPECT_EQ(by["vi SubmitJob PERMISSION_DENIED"], 1);
  EXPECT_EQ(by[" ListJobs UNAUTHENTICATED"], 1);
  EXPECT_EQ(by["cy CancelJob PERMISSION_DENIED"], 1);
  EXPECT_EQ(by["cy ExportJob PERMISSION_DENIED"], 1);
  EXPECT_EQ(by["bo CancelJob OK"], 1);
  EXPECT_EQ(by["bo SubmitJob OK"], 1);
  EXPECT_EQ(by["bo SubmitJob PERMISSION_DENIED"], 1);
  EXPECT_EQ(by["vi ListServers OK"], 1);
  EXPECT_EQ(by["vi WatchJob OK"] + by["vi WatchJob CANCELLED"], 1);
  for (const auto& r : lines) {
    if (r.user() == "bo" && r.call() == "SubmitJob" && r.code() == "OK") {
      EXPECT_EQ(r.job_id(), bo_job);
      EXPECT_EQ(r.role(), petra::v1::ROLE_MEMBER);
    }
  }
}

TEST_F(Users, ResumingAnotherMembersJobIsRefused) {
  std::string bo_job;
  ASSERT_TRUE(Submit("bo", &bo_job).ok());
  ASSERT_TRUE(Cancel("bo", bo_job).ok());
  grpc::ClientContext c;
  Deadline(c);
  petra::v1::SubmitJobRequest r;
  r.mutable_spec()->mutable_checkpoint()->set_resume_from_job(bo_job);
  petra::v1::Job job;
  grpc::Status s = As("cy")->SubmitJob(&c, r, &job);
  EXPECT_TRUE(Denied(s)) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("of user \"bo\""));
}

// Stage servers with --fleet-token-file: the coordinator that holds the
// token runs a job on them; anyone else's Release or Assign is refused
// (plaintext, where no certificate can say who calls).
class FleetToken : public FleetProcesses {};

TEST_F(FleetToken, OnlyTheTokenHolderControlsTheStages) {
  const std::string token_file = dir_.path() + "/fleet-token";
  std::ofstream(token_file) << "fleet-token-0123456789\n";
  ASSERT_NO_FATAL_FAILURE(StartStages(2, {"--fleet-token-file", token_file}));
  ASSERT_NO_FATAL_FAILURE(
      StartCoordinator(5, {"--fleet-token-file", token_file}));
  std::vector<std::string> submit = {"submit", "--watch"};
  for (const std::string& a : SmallJob(1)) submit.push_back(a);
  RunResult r = Petra(submit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("succeeded"));

  for (const std::string token : {"", "wrong-token-0123456789"}) {
    auto stub = petra::v1::StageService::NewStub(wire::CreateChannel(
        stage_addresses_[0], wire::TransportSecurity(), token));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    petra::v1::ReleaseResponse response;
    grpc::Status s = stub->Release(&c, petra::v1::ReleaseRequest(), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_THAT(s.error_message(), HasSubstr("Release: control calls need "
                                             "the fleet token"));
  }
  // Status stays open (probes, `petra health`).
  auto open = petra::v1::StageService::NewStub(
      wire::CreateChannel(stage_addresses_[0], wire::TransportSecurity(), ""));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  petra::v1::StageStatus status;
  EXPECT_TRUE(open->GetStatus(&c, petra::v1::GetStatusRequest(), &status).ok());
}

}  // namespace
}  // namespace petra::testing

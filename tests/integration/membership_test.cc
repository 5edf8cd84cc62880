// Fleet membership with real processes: stage servers join a coordinator
// that has no --stages (petra-stage-server --coordinator), the next job
// uses a server that joined, a running job survives the loss of one (its
// lease lapses; the job recovers onto a spare), and a server that stops
// leaves at once. Only the servers' flags name the coordinator.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "petra/v1/membership.grpc.pb.h"
#include "services/wire/grpc_defaults.h"
#include "tests/integration/fleet_fixture.h"

namespace petra::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;

class Membership : public FleetProcesses {
 protected:
  // The fleet as ListServers answers it.
  std::vector<petra::v1::FleetServer> Servers() {
    auto stub = petra::v1::CoordinatorService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    petra::v1::ListServersResponse response;
    grpc::Status s = stub->ListServers(&c, {}, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {response.servers().begin(), response.servers().end()};
  }
  std::set<std::string> ServerAddresses() {
    std::set<std::string> out;
    for (const petra::v1::FleetServer& s : Servers()) out.insert(s.address());
    return out;
  }
  // Polls until the fleet is exactly `want` (or 30 s pass).
  bool WaitForFleet(const std::set<std::string>& want) {
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < end) {
      if (ServerAddresses() == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }
  std::set<std::string> Placed(const petra::v1::Job& job) {
    std::set<std::string> out;
    for (const auto& p : job.stages()) out.insert(p.address());
    return out;
  }
};

// The coordinator finds stage servers by resolving a name (in Kubernetes a
// headless service; here "localhost", which gives 127.0.0.1 and, where the
// machine has IPv6, ::1) with no list and no registration, and probes what
// it finds: the server on 127.0.0.1 takes a job, an address where nothing
// listens is listed as unreachable and passed over, and a restarted
// coordinator resumes the job on what the name gives it again.
TEST_F(Membership, ServersThatANameResolvesToJoinAndTakeJobs) {
  ASSERT_NO_FATAL_FAILURE(StartStages(1));
  const std::string server = stage_addresses_[0];
  const std::string port = server.substr(server.rfind(':') + 1);
  // The coordinator is given no --stages: only the name.
  std::vector<std::string> listed_nowhere;
  std::swap(listed_nowhere, stage_addresses_);
  ASSERT_NO_FATAL_FAILURE(
      StartCoordinator(60, {"--stage-dns", "localhost:" + port}));
  std::swap(listed_nowhere, stage_addresses_);
  EXPECT_THAT(coordinator_->out(),
              HasSubstr("those --stage-dns localhost:" + port + " gives"));
  std::map<std::string, petra::v1::FleetServer> found;
  for (const petra::v1::FleetServer& s : Servers()) found[s.address()] = s;
  ASSERT_EQ(found.count(server), 1u) << coordinator_->err();
  EXPECT_EQ(found[server].origin(), petra::v1::FleetServer::ORIGIN_DNS);
  EXPECT_EQ(found[server].status().state(), petra::v1::StageStatus::STATE_IDLE);
  EXPECT_TRUE(found[server].has_lease_expire_time());
  for (const auto& [address, s] : found) {
    if (address != server) {
      EXPECT_FALSE(s.error().empty()) << address;
    }
  }
  RunResult listed = Petra({"servers"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, ::testing::ContainsRegex(server + " +dns "));

  std::vector<std::string> one = SmallJob(4);
  one[7] = "1";
  const std::string id = Submit(one);
  // A graceful stop of the coordinator mid-job: the next one resolves the
  // name again and resumes the job on what it finds.
  WaitUntilTrainingAfter(id, 1);
  ASSERT_EQ(coordinator_->SignalAndWait(SIGTERM, std::chrono::seconds(30)), 0);
  std::swap(listed_nowhere, stage_addresses_);
  ASSERT_NO_FATAL_FAILURE(
      StartCoordinator(60, {"--stage-dns", "localhost:" + port}));
  std::swap(listed_nowhere, stage_addresses_);
  const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(180));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  EXPECT_THAT(Placed(done), ElementsAre(server));
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_THAT(done.recoveries(0).reason(), HasSubstr("coordinator stopped"));
}

TEST_F(Membership, ServersJoinAndLeaveWithNoChangeToTheCoordinator) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(60, {"--member-lease", "2"}));
  const std::vector<std::string> join = {"--coordinator", address_};
  ASSERT_NO_FATAL_FAILURE(StartStages(2, join));
  ASSERT_TRUE(WaitForFleet({stage_addresses_[0], stage_addresses_[1]}))
      << coordinator_->err();
  RunResult listed = Petra({"servers"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr(stage_addresses_[0] + " "));
  EXPECT_THAT(listed.out, HasSubstr("registered"));
  EXPECT_THAT(listed.out, HasSubstr("idle"));
  for (const petra::v1::FleetServer& s : Servers()) {
    EXPECT_EQ(s.origin(), petra::v1::FleetServer::ORIGIN_REGISTERED);
    EXPECT_EQ(s.status().device(), "cpu");
    EXPECT_GT(s.status().memory_capacity_bytes(), 0u);
    EXPECT_FALSE(s.status().hostname().empty());
    EXPECT_TRUE(s.has_lease_expire_time());
  }

  // A job on the registered servers (the solo run of the job below).
  const std::string first = Submit(SmallJob(3));
  petra::v1::Job done = WaitForTheEnd(first, std::chrono::seconds(180));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();

  // A third joins; the next job (3 stages) uses it.
  ASSERT_NO_FATAL_FAILURE(StartStages(1, join));
  ASSERT_TRUE(WaitForFleet(
      {stage_addresses_[0], stage_addresses_[1], stage_addresses_[2]}));
  std::vector<std::string> three = SmallJob(1);
  three[7] = "3";
  const std::string wide = Submit(three);
  done = WaitForTheEnd(wide, std::chrono::seconds(180));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  EXPECT_THAT(Placed(done), Contains(stage_addresses_[2]));

  // A running job loses a server: its lease lapses, and the job recovers
  // onto the spare and trains on as before.
  const std::string id = Submit(SmallJob(3));
  WaitUntilTrainingAfter(id, 1);
  const petra::v1::Job running = GetJob(id);
  const std::string lost = running.stages(1).address();
  const int j = static_cast<int>(
      std::find(stage_addresses_.begin(), stage_addresses_.end(), lost) -
      stage_addresses_.begin());
  ASSERT_LT(j, 3);
  ASSERT_EQ(stages_[j]->SignalAndWait(SIGKILL, std::chrono::seconds(10)), -1);
  std::set<std::string> left(stage_addresses_.begin(), stage_addresses_.end());
  left.erase(lost);
  EXPECT_TRUE(WaitForFleet(left)) << "the lost server's lease did not lapse";
  done = WaitForTheEnd(id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.recoveries_size(), 1);
  EXPECT_THAT(Placed(done), Not(Contains(lost)));
  EXPECT_EQ(Placed(done), left);
  // It trained as the solo run did, loss for loss.
  const auto solo = Losses(first);
  const auto recovered = Losses(id);
  ASSERT_EQ(solo.size(), recovered.size());
  for (const auto& [key, loss] : solo) {
    ASSERT_TRUE(recovered.count(key))
        << "epoch " << key.first << " micro-batch " << key.second;
    EXPECT_NEAR(recovered.at(key), loss, 1e-5 * std::max(1.0, std::abs(loss)))
        << "epoch " << key.first << " micro-batch " << key.second;
  }

  // A server that stops (SIGTERM) leaves at once, not a lease later.
  const int k = j == 0 ? 1 : 0;
  const std::string going = stage_addresses_[k];
  ASSERT_EQ(stages_[k]->SignalAndWait(SIGTERM, std::chrono::seconds(30)), 0);
  EXPECT_NE(coordinator_->WaitForLine("member_left address=" + going,
                                      std::chrono::seconds(10)),
            "");
  left.erase(going);
  EXPECT_TRUE(WaitForFleet(left));
}

// The shape compose and Kubernetes ship: servers that register, and a
// coordinator that dies mid-job and comes back on its --state-dir and port.
// Its fleet is empty until the servers register again; the two running jobs
// wait for them (--recovery-timeout), resume from their checkpoints, and the
// queued one runs after. It once failed both jobs 0.7 s after the restart.
TEST_F(Membership, ACoordinatorKilledMidJobResumesEveryJobOnRegisteredServers) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(60, {"--member-lease", "2"}));
  const std::string coordinator = address_;
  ASSERT_NO_FATAL_FAILURE(StartStages(4, {"--coordinator", coordinator}));
  ASSERT_TRUE(WaitForFleet({stage_addresses_.begin(), stage_addresses_.end()}))
      << coordinator_->err();
  const std::vector<std::string> running = {Submit(SmallJob(5)),
                                            Submit(SmallJob(5))};
  const std::string queued = Submit(SmallJob(1));
  for (const std::string& id : running) WaitUntilTrainingAfter(id, 1);
  EXPECT_EQ(GetJob(queued).state(), petra::v1::JOB_STATE_QUEUED);
  // Two watchers: one rides through the restart, one gives up first.
  Subprocess patient(kPetra,
                     {"watch", "--coordinator", coordinator, running[0]});
  Subprocess hasty(kPetra, {"watch", "--coordinator", coordinator,
                            "--reconnect-timeout", "1", running[1]});
  ASSERT_NE(patient.WaitForLine("epoch"), "") << patient.err();
  ASSERT_NE(hasty.WaitForLine("epoch"), "") << hasty.err();
  ASSERT_EQ(coordinator_->SignalAndWait(SIGKILL, std::chrono::seconds(10)), -1);
  // Exit 3: the coordinator did not come back within a second.
  EXPECT_EQ(hasty.SignalAndWait(0, std::chrono::seconds(30)), 3);
  EXPECT_THAT(hasty.err(), HasSubstr("coordinator unreachable"));
  EXPECT_THAT(hasty.err(), HasSubstr("stayed unreachable for 1s"));

  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      60, {"--member-lease", "2", "--listen", coordinator, "--stages", ""}));
  for (const std::string& id : running) {
    const petra::v1::Job done = WaitForTheEnd(id, std::chrono::seconds(300));
    ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED)
        << done.DebugString() << coordinator_->err();
    ASSERT_EQ(done.recoveries_size(), 1);
    EXPECT_THAT(done.recoveries(0).reason(),
                HasSubstr("the coordinator stopped while the job was running"));
    EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);
  }
  EXPECT_EQ(WaitForTheEnd(queued, std::chrono::seconds(120)).state(),
            petra::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(ServerAddresses().size(), 4u);
  // The patient watcher followed its job to the end through the restart.
  EXPECT_EQ(patient.SignalAndWait(0, std::chrono::seconds(30)), 0)
      << patient.err();
  EXPECT_THAT(patient.err(), HasSubstr("coordinator unreachable"));
  EXPECT_THAT(patient.err(), HasSubstr("coordinator reachable again after"));
  // And the status says when, why and how long, in text.
  RunResult status = Petra({"status", running[0]});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, ::testing::ContainsRegex(
                              "recovery 1 at 20[0-9-]+T[0-9:.]+Z: the "
                              "coordinator stopped while the job was "
                              "running.*; training again from epoch 1's "
                              "checkpoint after [0-9.]+ s"));
}

TEST_F(Membership, OnlyServersWithTheFleetTokenJoin) {
  const std::string token_file = dir_.path() + "/fleet-token";
  std::ofstream(token_file) << "fleet-token-0123456789\n";
  const std::string wrong_file = dir_.path() + "/wrong-token";
  std::ofstream(wrong_file) << "wrong-token-0123456789\n";
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      5, {"--member-lease", "2", "--fleet-token-file", token_file}));
  ASSERT_NO_FATAL_FAILURE(StartStages(
      1, {"--coordinator", address_, "--fleet-token-file", wrong_file}));
  ASSERT_NO_FATAL_FAILURE(StartStages(
      1, {"--coordinator", address_, "--fleet-token-file", token_file}));
  ASSERT_TRUE(WaitForFleet({stage_addresses_[1]}));
  EXPECT_THAT(stages_[0]->WaitForLine("fleet_register_failed"),
              HasSubstr("Register: stage servers join with the fleet token"));
  // Nor can anyone else add an address, or remove one.
  for (const std::string token : {"", "wrong-token-0123456789"}) {
    auto stub = petra::v1::FleetService::NewStub(
        wire::CreateChannel(address_, wire::TransportSecurity(), token));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    petra::v1::RegisterRequest request;
    request.set_address("10.0.0.1:50051");
    petra::v1::RegisterResponse response;
    EXPECT_EQ(stub->Register(&c, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext c2;
    c2.set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
    petra::v1::LeaveRequest leave;
    leave.set_address(stage_addresses_[1]);
    petra::v1::LeaveResponse left;
    EXPECT_EQ(stub->Leave(&c2, leave, &left).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(ServerAddresses(), std::set<std::string>({stage_addresses_[1]}));
}

}  // namespace
}  // namespace petra::testing

#include "client/servers_command.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/coordinator_connection.h"
#include "client/job_progress.h"
#include "services/base/byte_text.h"
#include "services/base/flag_set.h"

namespace petra::client {
namespace {

// "12 s" until a lease runs out; "-" for a --stages server.
std::string LeaseLeft(const petra::v1::FleetServer& s) {
  if (!s.has_lease_expire_time()) return "-";
  const int64_t left =
      s.lease_expire_time().seconds() -
      google::protobuf::util::TimeUtil::GetCurrentTime().seconds();
  return absl::StrCat(std::max<int64_t>(0, left), " s");
}

const char* OriginName(petra::v1::FleetServer::Origin origin) {
  switch (origin) {
    case petra::v1::FleetServer::ORIGIN_STATIC:
      return "--stages";
    case petra::v1::FleetServer::ORIGIN_DNS:
      return "dns";
    default:
      return "registered";
  }
}

}  // namespace

int RunServers(const std::string& program,
               const std::vector<std::string>& args) {
  Connection coordinator;
  bool json = false;
  base::FlagSet flags(
      absl::StrCat(program, " servers [flags]"),
      "Lists the fleet's stage servers: those of the coordinator's --stages,\n"
      "then those that registered (petra-stage-server --coordinator) or that\n"
      "its --stage-dns found (origin \"dns\"), in the order they joined, each\n"
      "asked for its state: address, host, device, memory, state, job, and\n"
      "how long a registered server's lease has left.");
  AddCoordinatorFlag(flags, &coordinator);
  flags.AddBool("json", &json,
                "print the ListServersResponse as JSON ({\"servers\": "
                "[...]})");
  const std::string command = program + " servers";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  auto stub = Connect(command, coordinator);
  if (stub == nullptr) return 2;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  petra::v1::ListServersResponse response;
  grpc::Status s =
      stub->ListServers(&context, petra::v1::ListServersRequest(), &response);
  if (!s.ok()) return Fail(command, s, coordinator);
  if (json) {
    std::cout << (response.servers_size() == 0 ? "{\n  \"servers\": []\n}"
                                               : JobJson(response, true))
              << "\n";
    return 0;
  }
  if (response.servers_size() == 0) {
    std::printf(
        "no stage servers: the coordinator has no --stages and none has "
        "registered\n");
    return 0;
  }
  std::printf("%-28s %-10s %-20s %-8s %-10s %-10s %-12s %s\n", "ADDRESS",
              "ORIGIN", "HOST", "DEVICE", "MEMORY", "STATE", "JOB", "LEASE");
  for (const petra::v1::FleetServer& server : response.servers()) {
    const petra::v1::StageStatus& st = server.status();
    const bool answered = server.error().empty();
    std::string state = answered
                            ? absl::AsciiStrToLower(
                                  petra::v1::StageStatus::State_Name(st.state())
                                      .substr(sizeof("STATE_") - 1))
                            : "unreachable";
    std::printf(
        "%-28s %-10s %-20s %-8s %-10s %-10s %-12s %s\n",
        server.address().c_str(), OriginName(server.origin()),
        answered ? st.hostname().c_str() : "-",
        answered ? st.device().c_str() : "-",
        answered && st.memory_capacity_bytes() > 0
            ? base::Bytes(static_cast<int64_t>(st.memory_capacity_bytes()))
                  .c_str()
            : "-",
        state.c_str(), st.job_id().empty() ? "-" : st.job_id().c_str(),
        LeaseLeft(server).c_str());
    if (!answered) std::printf("  %s\n", server.error().c_str());
  }
  return 0;
}

}  // namespace petra::client

// FleetService over gRPC's callback API: stage servers register, renew
// their lease and leave. A thin adapter over FleetMembers. With a fleet
// token, only callers that carry it are heard (UNAUTHENTICATED otherwise);
// with a stage identity (mutual TLS), only callers whose certificate names
// it (PERMISSION_DENIED otherwise): no one else can add an address the
// coordinator would send a job's data to.
#pragma once

#include <string>

#include "coordinator/fleet_members.h"
#include "petra/v1/membership.grpc.pb.h"

namespace petra::coordinator {

class FleetServiceImpl final : public petra::v1::FleetService::CallbackService {
 public:
  // `members` outlives the service; `fleet_token` and `stage_identity` ""
  // check nothing.
  FleetServiceImpl(FleetMembers* members, std::string fleet_token,
                   std::string stage_identity);

  grpc::ServerUnaryReactor* Register(
      grpc::CallbackServerContext* context,
      const petra::v1::RegisterRequest* request,
      petra::v1::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const petra::v1::LeaveRequest* request,
                                  petra::v1::LeaveResponse* response) override;

 private:
  absl::Status Check(grpc::CallbackServerContext* context,
                     const char* call) const;

  FleetMembers* members_;
  const std::string fleet_token_;
  const std::string stage_identity_;
};

}  // namespace petra::coordinator

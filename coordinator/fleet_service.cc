#include "coordinator/fleet_service.h"

#include "absl/strings/str_cat.h"
#include "services/wire/bearer_token.h"
#include "services/wire/status_map.h"
#include "services/wire/transport_security.h"

namespace petra::coordinator {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

FleetServiceImpl::FleetServiceImpl(FleetMembers* members,
                                   std::string fleet_token,
                                   std::string stage_identity)
    : members_(members),
      fleet_token_(std::move(fleet_token)),
      stage_identity_(std::move(stage_identity)) {}

absl::Status FleetServiceImpl::Check(grpc::CallbackServerContext* context,
                                     const char* call) const {
  if (!fleet_token_.empty() &&
      !wire::CallCarriesToken(*context, fleet_token_)) {
    return absl::UnauthenticatedError(
        absl::StrCat(call,
                     ": stage servers join with the fleet token (this "
                     "coordinator's --fleet-token-file, the same as theirs)"));
  }
  if (stage_identity_.empty()) return absl::OkStatus();
  return wire::RequirePeerIdentity(*context->auth_context(), stage_identity_,
                                   call);
}

grpc::ServerUnaryReactor* FleetServiceImpl::Register(
    grpc::CallbackServerContext* context,
    const petra::v1::RegisterRequest* request,
    petra::v1::RegisterResponse* response) {
  if (absl::Status s = Check(context, "Register"); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<FleetMembers::Registration> r =
      members_->Register(request->address());
  if (r.ok()) {
    response->set_joined(r->joined);
    response->set_lease_seconds(static_cast<uint32_t>(r->lease.count()));
  }
  return Finish(context, r.status());
}

grpc::ServerUnaryReactor* FleetServiceImpl::Leave(
    grpc::CallbackServerContext* context,
    const petra::v1::LeaveRequest* request,
    petra::v1::LeaveResponse* /*response*/) {
  if (absl::Status s = Check(context, "Leave"); !s.ok()) {
    return Finish(context, s);
  }
  members_->Leave(request->address());
  return Finish(context, absl::OkStatus());
}

}  // namespace petra::coordinator

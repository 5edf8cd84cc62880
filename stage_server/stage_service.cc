#include "stage_server/stage_service.h"

#include "services/version.h"

namespace petra::stage_server {

StageServiceImpl::StageServiceImpl(std::string device)
    : device_(std::move(device)) {}

grpc::ServerUnaryReactor* StageServiceImpl::GetStatus(
    grpc::CallbackServerContext* context,
    const petra::v1::GetStatusRequest* /*request*/,
    petra::v1::StageStatus* response) {
  // No engine is attached yet, so the server is always idle; Assign and the
  // data-plane RPCs answer UNIMPLEMENTED (the generated defaults).
  response->set_state(petra::v1::StageStatus::STATE_IDLE);
  response->set_device(device_);
  response->set_version(kVersion);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace petra::stage_server

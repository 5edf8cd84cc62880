// StageService over gRPC's callback API: each RPC hands its work to the
// stage and never blocks the gRPC threads.
#pragma once

#include <string>

#include "petra/v1/stage.grpc.pb.h"

namespace petra::stage_server {

class StageServiceImpl final : public petra::v1::StageService::CallbackService {
 public:
  explicit StageServiceImpl(std::string device);

  grpc::ServerUnaryReactor* GetStatus(
      grpc::CallbackServerContext* context,
      const petra::v1::GetStatusRequest* request,
      petra::v1::StageStatus* response) override;

 private:
  const std::string device_;
};

}  // namespace petra::stage_server

// StageService over gRPC's callback API: a thin adapter over StageHost.
// Unary calls hand their work to the host and finish when it is done; each
// Forward/Backward stream has one reactor that assembles messages into
// micro-batches, hands them to the host's mailbox, and writes the replies
// (credits, per-message errors, completions) one at a time.
#pragma once

#include <string>

#include "petra/v1/stage.grpc.pb.h"
#include "stage_server/receive_budget.h"
#include "stage_server/stage_host.h"

namespace petra::stage_server {

class StageServiceImpl final : public petra::v1::StageService::CallbackService {
 public:
  // With a `coordinator_identity`, control calls from a peer whose verified
  // certificate does not name it are PERMISSION_DENIED; with a
  // `fleet_token`, control calls without it as their bearer token are
  // UNAUTHENTICATED. GetStatus is open to every peer the TLS layer admits;
  // the Forward/Backward streams to those that present the held job's data
  // key (StageHost::AdmitData), whatever the rest, and hold what `budget`
  // allows of micro-batches not yet whole.
  StageServiceImpl(StageHost* host, std::string coordinator_identity,
                   std::string fleet_token, ReceiveBudget* budget);

  grpc::ServerUnaryReactor* Assign(
      grpc::CallbackServerContext* context,
      const petra::v1::AssignRequest* request,
      petra::v1::AssignResponse* response) override;
  grpc::ServerUnaryReactor* Start(grpc::CallbackServerContext* context,
                                  const petra::v1::StartRequest* request,
                                  petra::v1::StartResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(
      grpc::CallbackServerContext* context,
      const petra::v1::CheckpointRequest* request,
      petra::v1::CheckpointResponse* response) override;
  grpc::ServerUnaryReactor* RestoreCheckpoint(
      grpc::CallbackServerContext* context,
      const petra::v1::RestoreCheckpointRequest* request,
      petra::v1::RestoreCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* ReadCheckpoint(
      grpc::CallbackServerContext* context,
      const petra::v1::ReadCheckpointRequest* request,
      petra::v1::ReadCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Release(
      grpc::CallbackServerContext* context,
      const petra::v1::ReleaseRequest* request,
      petra::v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(
      grpc::CallbackServerContext* context,
      const petra::v1::GetStatusRequest* request,
      petra::v1::StageStatus* response) override;
  grpc::ServerBidiReactor<petra::v1::ForwardMessage, petra::v1::StreamReply>*
  Forward(grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<petra::v1::BackwardMessage, petra::v1::StreamReply>*
  Backward(grpc::CallbackServerContext* context) override;

 private:
  // OK when the caller of the control call `call` may make it.
  absl::Status CheckController(grpc::CallbackServerContext* context,
                               const char* call) const;
  // A data stream's reactor: whole micro-batches go to the host.
  template <typename Message, typename Assembler>
  grpc::ServerBidiReactor<Message, petra::v1::StreamReply>* Stream(
      grpc::CallbackServerContext* context, bool backward);

  StageHost* host_;
  const std::string coordinator_identity_;
  const std::string fleet_token_;
  ReceiveBudget& budget_;
};

}  // namespace petra::stage_server

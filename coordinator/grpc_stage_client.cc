#include "coordinator/grpc_stage_client.h"

#include <chrono>

#include "petra/v1/stage.grpc.pb.h"
#include "services/wire/data_key.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/status_map.h"
#include "services/wire/stream_sender.h"

namespace petra::coordinator {
namespace {

using petra::v1::StageService;
using std::chrono::milliseconds;

// A stage that does not answer GetStatus within kProbeTimeout is
// unreachable; other control calls may take long (a checkpoint of a large
// stage).
constexpr milliseconds kProbeTimeout{3000};
constexpr milliseconds kControlTimeout{120000};
// Releasing a job that ended: a stage that is gone holds nothing.
constexpr milliseconds kReleaseTimeout{10000};

class GrpcFeedStream : public FeedStream {
 public:
  GrpcFeedStream(const std::string& peer, StageService::Stub& stub,
                 const std::string& data_key, StageClient::OnDone on_done)
      : sender_(
            peer,
            [&stub, data_key](grpc::ClientContext* c) {
              wire::PresentDataKey(c, data_key);
              return stub.Forward(c);
            },
            std::move(on_done)) {}
  absl::Status Send(
      const std::vector<petra::v1::ForwardMessage>& parts) override {
    return sender_.Send(parts);
  }
  absl::Status health() override { return sender_.health(); }
  void Cancel() override { sender_.Cancel(); }
  absl::Status Close() override { return sender_.Close(); }

 private:
  wire::StreamSender<petra::v1::ForwardMessage> sender_;
};

class GrpcStageClient : public StageClient {
 public:
  GrpcStageClient(const std::string& address,
                  const wire::TransportSecurity& security,
                  const std::string& fleet_token)
      : stub_(StageService::NewStub(
            wire::CreateChannel(address, security, fleet_token))) {}

  absl::StatusOr<petra::v1::StageStatus> GetStatus() override {
    petra::v1::StageStatus status;
    absl::Status s =
        Call(&StageService::Stub::GetStatus, petra::v1::GetStatusRequest(),
             &status, kProbeTimeout);
    if (!s.ok()) return s;
    return status;
  }
  absl::Status Assign(const petra::v1::AssignRequest& request,
                      petra::v1::AssignResponse* response) override {
    return Call(&StageService::Stub::Assign, request, response,
                kControlTimeout);
  }
  absl::Status Start(const petra::v1::StartRequest& request) override {
    petra::v1::StartResponse response;
    return Call(&StageService::Stub::Start, request, &response,
                kControlTimeout);
  }
  absl::Status Checkpoint(const petra::v1::CheckpointRequest& request,
                          petra::v1::CheckpointResponse* response) override {
    return Call(&StageService::Stub::Checkpoint, request, response,
                kControlTimeout);
  }
  absl::Status ReadCheckpoint(
      const petra::v1::ReadCheckpointRequest& request,
      petra::v1::ReadCheckpointResponse* response) override {
    return Call(&StageService::Stub::ReadCheckpoint, request, response,
                kControlTimeout);
  }
  absl::Status RestoreCheckpoint(
      const petra::v1::RestoreCheckpointRequest& request,
      petra::v1::RestoreCheckpointResponse* response) override {
    return Call(&StageService::Stub::RestoreCheckpoint, request, response,
                kControlTimeout);
  }
  absl::Status Release(const petra::v1::ReleaseRequest& request,
                       bool best_effort) override {
    petra::v1::ReleaseResponse response;
    return Call(&StageService::Stub::Release, request, &response,
                best_effort ? kReleaseTimeout : kControlTimeout);
  }
  std::unique_ptr<FeedStream> OpenFeed(const std::string& peer,
                                       const std::string& data_key,
                                       OnDone on_done) override {
    return std::make_unique<GrpcFeedStream>(peer, *stub_, data_key,
                                            std::move(on_done));
  }

 private:
  template <typename Request, typename Response, typename Method>
  absl::Status Call(Method method, const Request& request, Response* response,
                    milliseconds timeout) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::Status s = (stub_.get()->*method)(&context, request, response);
    if (s.ok()) return absl::OkStatus();
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::UnavailableError(s.error_message());
    }
    return wire::FromGrpcStatus(s);
  }

  std::unique_ptr<StageService::Stub> stub_;
};

}  // namespace

StageConnector GrpcStageConnector(const wire::TransportSecurity& security,
                                  const std::string& fleet_token) {
  return [security, fleet_token](const std::string& address) {
    return std::make_unique<GrpcStageClient>(address, security, fleet_token);
  };
}

}  // namespace petra::coordinator

// What the coordinator asks of one stage server, as an interface: the
// control calls and the feed stream. The gRPC client (grpc_stage_client.h)
// is one implementation; tests give others. No gRPC here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/stage.pb.h"

namespace petra::coordinator {

// The coordinator's end of a stage's Forward stream: data or labels going
// in, completions coming back.
class FeedStream {
 public:
  virtual ~FeedStream() = default;
  // Sends one micro-batch's messages once the stage grants a credit.
  virtual absl::Status Send(
      const std::vector<petra::v1::ForwardMessage>& parts) = 0;
  // OK while the stream is usable.
  virtual absl::Status health() = 0;
  // Aborts the stream from any thread.
  virtual void Cancel() = 0;
  // Half-closes and returns the stream's final status.
  virtual absl::Status Close() = 0;
};

// Errors: UNAVAILABLE when the server did not answer (down, unreachable, or
// past the call's deadline); otherwise the server's own status.
class StageClient {
 public:
  using OnDone = std::function<void(const petra::v1::MicroBatchDone&)>;
  virtual ~StageClient() = default;

  // With a short deadline: what tells a dead stage apart.
  virtual absl::StatusOr<petra::v1::StageStatus> GetStatus() = 0;
  virtual absl::Status Assign(const petra::v1::AssignRequest& request,
                              petra::v1::AssignResponse* response) = 0;
  virtual absl::Status Start(const petra::v1::StartRequest& request) = 0;
  virtual absl::Status Checkpoint(const petra::v1::CheckpointRequest& request,
                                  petra::v1::CheckpointResponse* response) = 0;
  virtual absl::Status ReadCheckpoint(
      const petra::v1::ReadCheckpointRequest& request,
      petra::v1::ReadCheckpointResponse* response) = 0;
  virtual absl::Status RestoreCheckpoint(
      const petra::v1::RestoreCheckpointRequest& request,
      petra::v1::RestoreCheckpointResponse* response) = 0;
  // `best_effort`: a short deadline (releasing a job that ended, where a
  // stage that is gone holds nothing); otherwise the control deadline
  // (releasing a stale job before the stage can be assigned).
  virtual absl::Status Release(const petra::v1::ReleaseRequest& request,
                               bool best_effort) = 0;
  // Opens the stage's Forward stream, presenting the stage's `data_key`;
  // `peer` names the stage in errors and `on_done` hears every completion
  // the stage reports on it.
  virtual std::unique_ptr<FeedStream> OpenFeed(const std::string& peer,
                                               const std::string& data_key,
                                               OnDone on_done) = 0;
};

// Makes the client of the stage server at an address.
using StageConnector =
    std::function<std::unique_ptr<StageClient>(const std::string& address)>;

}  // namespace petra::coordinator

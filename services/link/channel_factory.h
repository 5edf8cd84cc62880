// The one place a transport becomes a data channel: the stage's neighbour
// links and the coordinator's feed ask here, so a new transport is a new
// adapter in services/link and a case below, and nothing else changes.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "petra/v1/stage.pb.h"
#include "services/link/bulk_channel.h"
#include "services/wire/data_channel.h"

namespace petra::link {

class BulkReceiver;

// The sending end for a link the coordinator chose `transport` for: null
// for gRPC (the bytes stay in the messages). `keep_going` is asked while
// the channel waits for room (the stream's health). `wanted` is what the
// job asked for: with auto, a micro-batch the channel has no room for
// (a small /dev/shm) travels in the message instead of failing the job.
// `connect` reaches the receiver's BulkService and `data_key` is the
// receiving stage's (grpc_bulk only); `cuda_device` is the sending stage's
// GPU (cuda_ipc's ring goes there).
absl::StatusOr<std::unique_ptr<wire::PayloadPlacer>> MakePlacer(
    petra::v1::Transport transport, std::function<absl::Status()> keep_going,
    petra::v1::Transport wanted = petra::v1::TRANSPORT_AUTO,
    BulkConnector connect = nullptr, int cuda_device = -1,
    std::string data_key = "");

// The receiving end of one incoming stream: reads whatever channel the
// sender's messages name. `cuda_device`: the receiving stage's GPU, where
// cuda_ipc's tensors arrive (-1: the calling thread's, or none).
std::unique_ptr<wire::PayloadFetcher> MakeFetcher(int cuda_device = -1);

// What a process that receives links serves beside its own services (the
// bulk channel's receiving end), for as long as its server runs. `admit`
// says whether a stream presenting a data key may bring its job data.
class ChannelServices {
 public:
  explicit ChannelServices(
      std::function<absl::Status(const std::string& data_key)> admit);
  ~ChannelServices();
  std::vector<grpc::Service*> services() const;

 private:
  std::unique_ptr<BulkReceiver> bulk_;
};

// A stage server's status, as far as its data channels go: its
// LinkEndpoint (on the device `status` names: set it first), and what its
// receiving channels hold (0 between jobs).
void FillLinkStatus(petra::v1::StageStatus& status);

}  // namespace petra::link

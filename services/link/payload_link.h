// One direction of a link as its users see it: the stage loop's outbox
// (stage_server/neighbor_links.cc), the coordinator's feed and the
// transport benchmark hand it a micro-batch's payload; its encoding (the
// bytes into the data channel beside the stream where there is one, else
// into the messages) and the stream's credits are behind it
// (docs/DATA_PLANE.md). OpenLink (open_link.h) makes one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/wire/data_channel.h"
#include "services/wire/stage_messages.h"

namespace petra::link {

template <typename Payload, typename Message>
class PayloadLink {
 public:
  // Writes one micro-batch's messages once the receiver granted a credit
  // (the stream's sender).
  using SendParts = std::function<absl::Status(const std::vector<Message>&)>;
  // What one micro-batch put on the link, for metrics: the data channel
  // its tensors went through ("grpc": the messages) and its bytes.
  struct Sent {
    const char* transport = "grpc";
    int64_t bytes = 0;
  };

  // `channel` (null: the bytes go in the messages); `chunk_bytes` caps a
  // message's share of one tensor.
  PayloadLink(SendParts send, std::unique_ptr<wire::PayloadPlacer> channel,
              uint64_t chunk_bytes)
      : send_(std::move(send)),
        channel_(std::move(channel)),
        chunk_bytes_(chunk_bytes) {}

  // Encodes `payload` and sends it; its tensors must be on the host unless
  // the channel keeps_device() (then device tensors must be computed).
  absl::StatusOr<Sent> Send(Payload& payload) const;
  // True when device tensors travel as they are (cuda_ipc): the sender
  // skips their copy to the host.
  bool keeps_device() const {
    return channel_ != nullptr && channel_->takes_device_pieces();
  }
  // Makes a Send waiting for room in the data channel, or a later one,
  // fail at once (from any thread); the stream is its owner's to cancel.
  void Cancel() const {
    if (channel_ != nullptr) channel_->Cancel();
  }

 private:
  SendParts send_;
  std::unique_ptr<wire::PayloadPlacer> channel_;
  uint64_t chunk_bytes_;
};

using ForwardLink = PayloadLink<model::ForwardBatch, petra::v1::ForwardMessage>;
using BackwardLink =
    PayloadLink<model::BackwardBatch, petra::v1::BackwardMessage>;

}  // namespace petra::link

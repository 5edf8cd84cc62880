// The one wiring of a link: the stage server's neighbour links and the
// coordinator's feed hand it a stream (how to send its messages, how it
// is) and the route the coordinator chose, and get the link back with its
// data channel made and, where the transport needs them, its connections.
// A new transport changes MakePlacer (channel_factory.h) and nothing here.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/link/payload_link.h"
#include "services/wire/transport_security.h"

namespace petra::link {

// Where one direction of a link goes, and through what.
struct LinkRoute {
  // The data channel the coordinator chose for this link.
  petra::v1::Transport transport = petra::v1::TRANSPORT_GRPC;
  // What the job asked for: with auto, a micro-batch the channel has no
  // room for travels in the messages instead of failing the job.
  petra::v1::Transport wanted = petra::v1::TRANSPORT_AUTO;
  // The receiver, for the transports that open connections of their own
  // (grpc_bulk); empty: none can be opened, and such a transport is
  // refused.
  std::string address;
  wire::TransportSecurity security;
  // The sending stage's GPU (-1: the CPU), where cuda_ipc's ring lives.
  int cuda_device = -1;
  // The receiving stage's data key, which the link's own connections
  // present (grpc_bulk's; the stream presents it itself).
  std::string data_key;
};

// A link over the stream `send` writes to; `health` is asked while the
// data channel waits for room. The error of a channel that cannot be made.
template <typename Payload, typename Message>
absl::StatusOr<std::unique_ptr<PayloadLink<Payload, Message>>> OpenLink(
    const LinkRoute& route,
    typename PayloadLink<Payload, Message>::SendParts send,
    std::function<absl::Status()> health);

inline absl::StatusOr<std::unique_ptr<ForwardLink>> OpenForwardLink(
    const LinkRoute& route, ForwardLink::SendParts send,
    std::function<absl::Status()> health) {
  return OpenLink<model::ForwardBatch, petra::v1::ForwardMessage>(
      route, std::move(send), std::move(health));
}

inline absl::StatusOr<std::unique_ptr<BackwardLink>> OpenBackwardLink(
    const LinkRoute& route, BackwardLink::SendParts send,
    std::function<absl::Status()> health) {
  return OpenLink<model::BackwardBatch, petra::v1::BackwardMessage>(
      route, std::move(send), std::move(health));
}

}  // namespace petra::link

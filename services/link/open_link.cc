#include "services/link/open_link.h"

#include <utility>

#include "services/link/channel_factory.h"
#include "services/wire/grpc_defaults.h"

namespace petra::link {

template <typename Payload, typename Message>
absl::StatusOr<std::unique_ptr<PayloadLink<Payload, Message>>> OpenLink(
    const LinkRoute& route,
    typename PayloadLink<Payload, Message>::SendParts send,
    std::function<absl::Status()> health) {
  BulkConnector connect;
  if (!route.address.empty()) {
    connect = [address = route.address, security = route.security](int i) {
      return wire::CreateBulkChannel(address, security, i);
    };
  }
  absl::StatusOr<std::unique_ptr<wire::PayloadPlacer>> channel =
      MakePlacer(route.transport, std::move(health), route.wanted,
                 std::move(connect), route.cuda_device, route.data_key);
  if (!channel.ok()) return channel.status();
  return std::make_unique<PayloadLink<Payload, Message>>(
      std::move(send), std::move(*channel), wire::kTensorChunkBytes);
}

template absl::StatusOr<std::unique_ptr<ForwardLink>>
OpenLink<model::ForwardBatch, petra::v1::ForwardMessage>(
    const LinkRoute&, ForwardLink::SendParts, std::function<absl::Status()>);
template absl::StatusOr<std::unique_ptr<BackwardLink>>
OpenLink<model::BackwardBatch, petra::v1::BackwardMessage>(
    const LinkRoute&, BackwardLink::SendParts, std::function<absl::Status()>);

}  // namespace petra::link

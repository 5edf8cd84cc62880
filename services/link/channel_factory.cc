#include "services/link/channel_factory.h"

#include "absl/strings/str_cat.h"
#include "services/link/shared_ring_channel.h"
#include "services/link/transport_choice.h"

namespace petra::link {

absl::StatusOr<std::unique_ptr<wire::PayloadPlacer>> MakePlacer(
    petra::v1::Transport transport, std::function<absl::Status()> keep_going,
    petra::v1::Transport wanted) {
  switch (transport) {
    case petra::v1::TRANSPORT_UNSPECIFIED:
    case petra::v1::TRANSPORT_GRPC:
      return nullptr;
    case petra::v1::TRANSPORT_SHM:
      return std::make_unique<SharedRingPlacer>(
          std::move(keep_going), kRingSlots,
          /*may_fall_back=*/wanted != petra::v1::TRANSPORT_SHM);
    default:
      return absl::UnimplementedError(absl::StrCat(
          "transport ", TransportName(transport), " has no data channel here"));
  }
}

std::unique_ptr<wire::PayloadFetcher> MakeFetcher() {
  return std::make_unique<SharedRingFetcher>();
}

}  // namespace petra::link

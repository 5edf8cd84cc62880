#include "services/link/channel_factory.h"

#include "absl/strings/str_cat.h"
#include "services/link/bulk_channel.h"
#include "services/link/bulk_service.h"
#include "services/link/endpoint.h"
#include "services/link/ipc_device.h"
#include "services/link/shared_ring_channel.h"
#include "services/link/transport_choice.h"

namespace petra::link {

absl::StatusOr<std::unique_ptr<wire::PayloadPlacer>> MakePlacer(
    petra::v1::Transport transport, std::function<absl::Status()> keep_going,
    petra::v1::Transport wanted, BulkConnector connect, int cuda_device,
    std::string data_key) {
  switch (transport) {
    case petra::v1::TRANSPORT_UNSPECIFIED:
    case petra::v1::TRANSPORT_GRPC:
      return nullptr;
    case petra::v1::TRANSPORT_SHM:
      return std::make_unique<SharedRingPlacer>(
          std::move(keep_going), kRingSlots,
          /*may_fall_back=*/wanted != petra::v1::TRANSPORT_SHM);
    case petra::v1::TRANSPORT_CUDA_IPC: {
      std::string why;
      IpcDevice* device = CudaIpcDevice(&why);
      if (device == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("transport cuda_ipc: ", why));
      }
      // Never falls back to the message: its bytes are on the device.
      return std::make_unique<SharedRingPlacer>(
          std::move(keep_going), kRingSlots, /*may_fall_back=*/false,
          /*max_ring_bytes=*/0, device, cuda_device);
    }
    case petra::v1::TRANSPORT_GRPC_BULK:
      if (connect == nullptr) {
        return absl::FailedPreconditionError(
            "transport grpc_bulk: this link has no way to reach its "
            "receiver's BulkService (it is for links between stages)");
      }
      return std::make_unique<GrpcBulkPlacer>(
          std::move(connect), std::move(keep_going), std::move(data_key));
    default:
      return absl::UnimplementedError(absl::StrCat(
          "transport ", TransportName(transport), " has no data channel here"));
  }
}

namespace {

// Each reference goes to the channel its ring names.
class AnyChannelFetcher final : public wire::PayloadFetcher {
 public:
  explicit AnyChannelFetcher(int cuda_device) : shm_(cuda_device) {}
  absl::Status Fetch(std::vector<Field>& fields,
                     const wire::TensorLimits& limits) override {
    std::vector<Field> shm, bulk;
    std::vector<Field*> shm_to, bulk_to;
    for (Field& f : fields) {
      if (f.tensor == nullptr || !f.tensor->has_slot()) continue;
      const bool is_bulk = IsBulkRing(f.tensor->slot().ring());
      (is_bulk ? bulk : shm).push_back(f);
      (is_bulk ? bulk_to : shm_to).push_back(&f);
    }
    // Both, also after a refusal: each frees what its references hold.
    absl::Status status;
    if (!shm.empty()) status.Update(shm_.Fetch(shm, limits));
    if (!bulk.empty()) status.Update(bulk_.Fetch(bulk, limits));
    for (size_t i = 0; i < shm.size(); ++i) *shm_to[i] = std::move(shm[i]);
    for (size_t i = 0; i < bulk.size(); ++i) *bulk_to[i] = std::move(bulk[i]);
    return status;
  }
  uint64_t fetched_bytes() const override {
    return shm_.fetched_bytes() + bulk_.fetched_bytes();
  }

 private:
  SharedRingFetcher shm_;
  BulkFetcher bulk_;
};

}  // namespace

std::unique_ptr<wire::PayloadFetcher> MakeFetcher(int cuda_device) {
  return std::make_unique<AnyChannelFetcher>(cuda_device);
}

ChannelServices::ChannelServices(
    std::function<absl::Status(const std::string&)> admit)
    : bulk_(std::make_unique<BulkReceiver>(std::move(admit))) {}

ChannelServices::~ChannelServices() = default;

std::vector<grpc::Service*> ChannelServices::services() const {
  return {bulk_.get()};
}

void FillLinkStatus(petra::v1::StageStatus& status) {
  *status.mutable_endpoint() = LocalEndpoint();
  status.mutable_endpoint()->set_device(status.device());
  status.set_bulk_inbox_bytes(BulkInbox::Global().held_bytes());
}

}  // namespace petra::link

// TRANSPORT_GRPC_BULK's data channel (docs/DATA_PLANE.md): the placer cuts
// a micro-batch's tensors into frames of at most `frame_bytes`, deals them
// to several streams (one connection each) to the receiver's BulkService,
// sending each tensor's own memory (no copy), and returns once every frame
// is acknowledged, so the control message that follows finds its bytes in
// the receiver's inbox. The fetcher takes them from there.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "services/link/bulk_inbox.h"
#include "services/wire/data_channel.h"

namespace petra::link {

// Connections per link: on loopback, more than the cores add nothing; across
// hosts one HTTP/2 connection carries about 1 GB/s (grpc#14378).
inline constexpr int kBulkConnections = 4;
// Frames small enough that the receiver copies one while the next crosses.
inline constexpr uint64_t kBulkFrameBytes = 4 << 20;
// SlotRef.ring of a bulk reference: this prefix and the link id.
inline constexpr char kBulkRingPrefix[] = "grpc_bulk:";

// The channel to the receiver for connection `index` (each a connection of
// its own).
using BulkConnector = std::function<std::shared_ptr<grpc::Channel>(int index)>;

class GrpcBulkPlacer : public wire::PayloadPlacer {
 public:
  // `keep_going` is asked while Place waits for acknowledgements (the
  // control stream's health); every stream presents `data_key`, the
  // receiving stage's (wire/data_key.h).
  GrpcBulkPlacer(BulkConnector connect,
                 std::function<absl::Status()> keep_going, std::string data_key,
                 int connections = kBulkConnections,
                 uint64_t frame_bytes = kBulkFrameBytes);
  ~GrpcBulkPlacer() override;

  absl::StatusOr<std::vector<petra::v1::SlotRef>> Place(
      const std::vector<wire::PayloadPiece>& pieces) override;
  void Cancel() override;
  const char* name() const override { return "grpc_bulk"; }

 private:
  class Stream;
  struct State;
  absl::Status Open();
  // Cancels the streams and waits until gRPC holds none of our memory.
  void Abort(absl::Status why);

  const BulkConnector connect_;
  const std::function<absl::Status()> keep_going_;
  const std::string data_key_;
  const int connections_;
  const uint64_t frame_bytes_;
  const uint64_t link_;
  uint64_t sequence_ = 0;
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// Reads the references whose ring starts with kBulkRingPrefix.
class BulkFetcher : public wire::PayloadFetcher {
 public:
  explicit BulkFetcher(BulkInbox& inbox = BulkInbox::Global())
      : inbox_(inbox) {}
  absl::Status Fetch(std::vector<Field>& fields,
                     const wire::TensorLimits& limits) override;
  uint64_t fetched_bytes() const override { return fetched_; }

 private:
  BulkInbox& inbox_;
  uint64_t fetched_ = 0;
};

bool IsBulkRing(const std::string& ring);

}  // namespace petra::link

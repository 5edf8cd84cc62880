// Where the bulk gRPC channel's bytes wait for their control message
// (docs/DATA_PLANE.md): the BulkService's streams copy each frame into its
// micro-batch's receive buffer here, and the receiving stream's fetcher
// takes the micro-batch once the message that names it arrives. The sender
// sends that message only after every frame was acknowledged, so a fetch
// never waits. No gRPC.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/statusor.h"
#include "services/link/shared_ring_channel.h"

namespace petra::link {

class BulkInbox {
 public:
  // A micro-batch's payload larger than this is refused (a corrupt or
  // hostile frame must not make the receiver allocate terabytes).
  static constexpr uint64_t kMaxPayloadBytes = uint64_t{64} << 30;
  // Micro-batches of one link held at once; credits keep a well-behaved
  // sender far below.
  static constexpr int kMaxHeldPerLink = 64;

  // The process's inbox (links are named by random ids, as rings are by
  // names: whichever stream receives the control message finds them).
  static BulkInbox& Global();

  BulkInbox();

  // Where a frame's `bytes` go (kept alive while the caller copies, even if
  // the link ends meanwhile): checked against the micro-batch's size (the
  // same in every frame) and against the frames received before.
  absl::StatusOr<std::shared_ptr<uint8_t>> Reserve(
      uint64_t link, uint64_t sequence, uint64_t total, uint64_t payload,
      uint64_t offset, uint64_t bytes);
  // The frame's bytes are in place.
  void Arrived(uint64_t link, uint64_t sequence, uint64_t bytes);
  // The whole payload of a micro-batch, removed from the inbox: NOT_FOUND
  // when it never arrived (or was dropped), FAILED_PRECONDITION when part
  // of it is missing.
  absl::StatusOr<std::pair<std::shared_ptr<const uint8_t>, uint64_t>> Take(
      uint64_t link, uint64_t sequence);
  // A stream of `link` began or ended. When a link has no stream left,
  // what it still holds is dropped: a sender closes its bulk streams only
  // after its control stream was closed, and the receiver had fetched every
  // micro-batch before it closed the control stream; a sender that died or
  // was cancelled sends no more.
  void Opened(uint64_t link);
  void Closed(uint64_t link);

  // Payload bytes all links may hold at once (the stage server's
  // --max-receive-bytes); a micro-batch past it is RESOURCE_EXHAUSTED.
  void SetMaxHeldBytes(uint64_t bytes);
  // Payload bytes and micro-batches held now (leak checks).
  uint64_t held_bytes();
  int held_micro_batches();

 private:
  struct Payload {
    std::shared_ptr<void> buffer;
    uint64_t total = 0;
    uint64_t payload = 0;
    uint64_t reserved = 0;
    uint64_t arrived = 0;
  };
  struct Link {
    int streams = 0;
    std::map<uint64_t, Payload> payloads;
  };

  uint64_t HeldBytesLocked() const;

  std::mutex mu_;
  uint64_t max_held_ = kMaxPayloadBytes;
  std::map<uint64_t, Link> links_;
  std::shared_ptr<BufferPool> pool_;
};

}  // namespace petra::link

// A ring of equally sized slots in one POSIX shared-memory segment: the
// data channel of TRANSPORT_SHM (docs/DATA_PLANE.md). The sending process
// creates it and fills slots in turn; the receiving process maps it by the
// name the stream's messages carry, copies each micro-batch out and frees
// its slot. Each slot's state word lives in the segment, so freeing a slot
// needs no message back (a futex wakes a waiting sender).
//
// Names are "/petra-<pid namespace>-<pid>-<n>". The receiver unlinks a name
// as soon as it has mapped it, so the memory goes when both ends unmap; the
// sender unlinks one the receiver never opened when it lets the ring go,
// and SweepOrphanRings unlinks those of processes that died first. No torch,
// no gRPC.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace petra::link {

// Most slots a ring may have, and most bytes a slot may hold (a bad header
// from a peer is refused before anything is mapped).
inline constexpr int kMaxRingSlots = 64;
inline constexpr uint64_t kMaxSlotBytes = uint64_t{16} << 30;

class SharedRing {
 public:
  // A slot the sender holds between Acquire and Publish.
  struct Lease {
    uint32_t index = 0;
    uint64_t sequence = 0;
    uint8_t* data = nullptr;
  };

  // Makes a new ring of `slots` slots of `slot_bytes` each (rounded up to
  // 64 bytes), under a fresh name. `medium` says what the slots hold, for
  // the receiver: 0 the payload itself (shm), else an IpcKind whose memory
  // holds the payload and each slot its descriptor (device_slots.h).
  static absl::StatusOr<std::unique_ptr<SharedRing>> Create(
      int slots, uint64_t slot_bytes, uint32_t medium = 0);
  // Maps the ring `name` another process made, checks its header against
  // the segment's size, and unlinks the name. NOT_FOUND when no such ring
  // is visible here (another host or another /dev/shm).
  static absl::StatusOr<std::unique_ptr<SharedRing>> Open(
      const std::string& name);
  ~SharedRing();
  SharedRing(const SharedRing&) = delete;
  SharedRing& operator=(const SharedRing&) = delete;

  const std::string& name() const { return name_; }
  int slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t medium() const { return medium_; }
  // True when no slot holds an unread micro-batch.
  bool Idle() const;

  // Sender: waits until the next slot in turn is free, asking `keep_going`
  // every 50 ms while it waits (its error ends the wait: the receiver is
  // gone or the link was cancelled).
  absl::StatusOr<Lease> Acquire(
      const std::function<absl::Status()>& keep_going);
  // Sender: the slot's bytes are written; the receiver may read them.
  void Publish(const Lease& lease);
  // Sender: slot `index`'s bytes, whatever its state (a device ring writes
  // each slot's descriptor once, before the first Acquire).
  uint8_t* SlotData(uint32_t index) { return data(index); }

  // Receiver: `bytes` at `offset` of slot `index`, which must hold the
  // micro-batch `sequence` names. INVALID_ARGUMENT for anything out of
  // bounds, an empty slot or a stale sequence.
  absl::StatusOr<const uint8_t*> Read(uint32_t index, uint64_t sequence,
                                      uint64_t offset, uint64_t bytes) const;
  // Receiver: done with slot `index` holding micro-batch `sequence`; the
  // sender may reuse it. A stale reference (another sequence) frees
  // nothing: the slot may hold a micro-batch not yet read.
  void Free(uint32_t index, uint64_t sequence);

 private:
  struct Header;
  struct SlotState;
  SharedRing(std::string name, bool creator, void* base, uint64_t size);
  SlotState& state(uint32_t index) const;
  uint8_t* data(uint32_t index) const;

  const std::string name_;
  const bool creator_;
  void* const base_;
  const uint64_t size_;
  int slots_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t data_offset_ = 0;
  uint32_t medium_ = 0;
  uint32_t next_ = 0;      // sender: the slot Acquire takes next
  uint64_t sequence_ = 0;  // sender: micro-batches published
};

// The prefix of every ring's name this process makes ("/petra-<ns>-<pid>-").
std::string RingNamePrefix();
// Unlinks the rings of processes of this pid namespace that are no longer
// running; returns how many.
int SweepOrphanRings();
// Rings named in /dev/shm that process `pid` made (for leak checks).
int CountRingNames(int pid);
// Rings process `pid` has mapped, by /proc/<pid>/maps (for leak checks).
int CountRingMappings(int pid);

}  // namespace petra::link

// Transport cuda_ipc's rings (docs/DATA_PLANE.md): the shared-memory ring's
// protocol (shared_ring.h: slot states, sequences, futex waits, what a dead
// peer leaves) with the payload in device memory beside it. The sender
// exports one region per ring (slots x slot bytes, outside any caching
// allocator) and one interprocess event per slot, and writes each slot's
// descriptor (the handles) into the ring once. Per micro-batch it copies
// the pieces into a free slot's part of the region on its stream, records
// the slot's event and publishes the slot. The receiver maps the region
// and opens the events once per ring, makes its stream wait on the event,
// copies the bytes out and frees the slot once the copy is done. No host
// copy; the CUDA calls are behind IpcDevice (ipc_device.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "services/link/ipc_device.h"
#include "services/link/payload_layout.h"
#include "services/link/shared_ring.h"
#include "services/wire/data_channel.h"

namespace petra::link {

// Bytes of the control ring's slots: one descriptor each.
inline constexpr uint64_t kSlotDescriptorBytes = 192;

// The sender's side of one ring: its control segment and its region.
class DeviceSlots {
 public:
  // A ring of `slots` slots for micro-batches of up to `slot_bytes`.
  static absl::StatusOr<std::unique_ptr<DeviceSlots>> Create(
      IpcDevice& device, int slots, uint64_t slot_bytes);
  ~DeviceSlots();

  SharedRing& control() { return *control_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Copies `pieces` to their `layout` offsets in the leased slot, then
  // records its event: the slot may be published.
  absl::Status Write(const SharedRing::Lease& lease,
                     const std::vector<wire::PayloadPiece>& pieces,
                     const PayloadLayout& layout);

 private:
  DeviceSlots(IpcDevice& device, std::unique_ptr<SharedRing> control,
              uint64_t slot_bytes);
  IpcDevice& device_;
  std::unique_ptr<SharedRing> control_;
  const uint64_t slot_bytes_;
  uint8_t* region_ = nullptr;
  std::vector<void*> events_;
};

// The receiver's side of one ring: the region mapped and the events
// opened, each once, on first use.
class DeviceSlotsView {
 public:
  // `control` is the ring as opened (its medium names `device`'s kind).
  DeviceSlotsView(IpcDevice& device, const SharedRing& control);
  ~DeviceSlotsView();
  DeviceSlotsView(const DeviceSlotsView&) = delete;
  DeviceSlotsView& operator=(const DeviceSlotsView&) = delete;

  // Queues the copy of `bytes` at `offset` of slot `index` (holding
  // micro-batch `sequence`) into `dst`, after the slot's event.
  // INVALID_ARGUMENT for anything out of bounds, a stale sequence or a
  // descriptor that does not match the ring's.
  absl::Status CopyOut(uint32_t index, uint64_t sequence, uint64_t offset,
                       uint64_t bytes, void* dst);

 private:
  absl::StatusOr<void*> Event(uint32_t index, uint64_t sequence);
  IpcDevice& device_;
  const SharedRing& control_;
  uint8_t* region_ = nullptr;
  uint64_t slot_bytes_ = 0;
  IpcHandle region_handle_{};
  std::vector<void*> events_;
};

}  // namespace petra::link

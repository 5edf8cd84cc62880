// The data channel of TRANSPORT_SHM and TRANSPORT_CUDA_IPC: wire::PayloadPlacer
// and wire::PayloadFetcher over shared_ring.h, with the payload in the ring's
// slots (shm) or in device memory beside it (cuda_ipc, device_slots.h).
// The placer makes its ring at the first micro-batch, sized to it, and a
// larger one when a micro-batch outgrows it; the fetcher maps each ring it
// is named once and copies every micro-batch out at once, so a slot is held
// only while its micro-batch crosses (never while it waits in the
// receiver's queue: credits bound that).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "services/link/device_slots.h"
#include "services/link/ipc_device.h"
#include "services/link/shared_ring.h"
#include "services/wire/data_channel.h"

namespace petra::link {

// Slots per ring: one being written, one being read, one to spare.
inline constexpr int kRingSlots = 3;

class SharedRingPlacer : public wire::PayloadPlacer {
 public:
  // `keep_going` is asked while Place waits for a free slot (the stream's
  // health: a receiver that is gone frees nothing). `may_fall_back`: see
  // wire::PayloadPlacer. `max_ring_bytes` (0: no cap) bounds one ring's
  // shared memory; a micro-batch whose ring would exceed it gets
  // RESOURCE_EXHAUSTED, as when /dev/shm is full. `device` (null: shm)
  // holds the payload instead, as transport cuda_ipc, on GPU `cuda_device`
  // (-1: the calling thread's).
  explicit SharedRingPlacer(std::function<absl::Status()> keep_going = {},
                            int slots = kRingSlots, bool may_fall_back = false,
                            uint64_t max_ring_bytes = 0,
                            IpcDevice* device = nullptr, int cuda_device = -1);
  ~SharedRingPlacer() override;
  absl::StatusOr<std::vector<petra::v1::SlotRef>> Place(
      const std::vector<wire::PayloadPiece>& pieces) override;
  void Cancel() override { cancelled_ = true; }
  const char* name() const override {
    return device_ != nullptr ? "cuda_ipc" : "shm";
  }
  bool may_fall_back() const override { return may_fall_back_; }
  bool takes_device_pieces() const override { return device_ != nullptr; }
  // Rings this placer holds (the current one and outgrown ones whose slots
  // are still being read).
  int rings() const {
    return static_cast<int>(old_.size()) + (ring_.control() ? 1 : 0);
  }

 private:
  const std::function<absl::Status()> keep_going_;
  const int slots_;
  const bool may_fall_back_;
  const uint64_t max_ring_bytes_;
  // The smallest micro-batch no ring could be made for (0: none yet):
  // larger ones fail at once instead of trying /dev/shm again each time.
  uint64_t no_room_ = 0;
  std::atomic<bool> cancelled_{false};
  IpcDevice* const device_;
  const int cuda_device_;
  // One ring at the sender: the payload in its slots, or on the device.
  struct Ring {
    std::unique_ptr<SharedRing> host;
    std::unique_ptr<DeviceSlots> device;
    SharedRing* control() const {
      return host ? host.get() : device ? &device->control() : nullptr;
    }
    uint64_t capacity() const {
      return host ? host->slot_bytes() : device ? device->slot_bytes() : 0;
    }
  };
  Ring ring_;
  std::vector<Ring> old_;
};

// Receive buffers, reused: each goes back to the pool when the tensor over
// it is freed (the pool outlives its fetcher while tensors use it). Host
// memory, or `device`'s (cuda_ipc's receive buffers).
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  explicit BufferPool(IpcDevice* device = nullptr) : device_(device) {}
  ~BufferPool();
  // A buffer of at least `bytes`, as a reference that returns it here.
  std::shared_ptr<void> Take(uint64_t bytes);
  int free_buffers();

 private:
  void Give(uint64_t capacity, void* data);
  void Release(void* data);
  // Free buffers kept; beyond, a returned buffer is released.
  static constexpr size_t kMaxFree = 4;
  IpcDevice* const device_;
  std::mutex mu_;
  std::vector<std::pair<uint64_t, void*>> free_;  // capacity, memory
};

class SharedRingFetcher : public wire::PayloadFetcher {
 public:
  // `cuda_device`: where a device ring's bytes are copied to (-1: the
  // calling thread's current device).
  explicit SharedRingFetcher(int cuda_device = -1);
  ~SharedRingFetcher() override;
  absl::Status Fetch(std::vector<Field>& fields,
                     const wire::TensorLimits& limits) override;
  uint64_t fetched_bytes() const override { return fetched_; }
  int rings() const { return static_cast<int>(rings_.size()); }

 private:
  // One ring as the receiver holds it; `view` for a device ring.
  struct Opened {
    std::unique_ptr<SharedRing> control;
    std::unique_ptr<DeviceSlotsView> view;
    IpcDevice* device = nullptr;
  };
  absl::StatusOr<Opened*> Ring(const std::string& name);
  // The receive buffers of `device` (null: host memory).
  BufferPool& Pool(IpcDevice* device);

  // Most rings kept mapped per stream: a sender replaces its ring only when
  // a micro-batch outgrows it.
  static constexpr size_t kMaxRings = 8;
  std::map<std::string, Opened> rings_;
  std::deque<std::string> order_;  // oldest first
  uint64_t fetched_ = 0;
  std::map<IpcDevice*, std::shared_ptr<BufferPool>> pools_;
  const int cuda_device_;
};

}  // namespace petra::link

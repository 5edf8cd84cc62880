// What transport cuda_ipc needs from a device runtime (docs/DATA_PLANE.md):
// memory another process on the host can map, events it can wait on, and
// copies ordered by them. The CUDA runtime implements it
// (cuda_ipc_device.cc, built with PETRA_WITH_CUDA); a host stand-in
// (host_ipc_device.cc) implements it with shared host memory, so that the
// protocol over it (device_slots.h: slot states, sequences, ring growth,
// what a dead peer leaves) runs in the CPU build's conformance suite. No
// torch, no gRPC, no CUDA header.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace petra::link {

// An exported memory region's or event's handle, as the peer needs it
// (cudaIpcMemHandle_t and cudaIpcEventHandle_t are 64 bytes).
inline constexpr size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<uint8_t, kIpcHandleBytes>;

// Which implementation made a ring: its receiver must use the same.
enum class IpcKind : uint32_t {
  kUnspecified = 0,
  kCuda = 1,
  kHostStandIn = 2,
};

// What a process holds through one IpcDevice, for leak checks: each count
// returns to zero once every ring and receive buffer is released.
struct IpcCounts {
  int exported_regions = 0;  // sender: memory allocated for a peer to map
  int mapped_regions = 0;    // receiver: a peer's memory mapped here
  int events = 0;            // sender: interprocess events created
  int opened_events = 0;     // receiver: a peer's events opened
  int local_buffers = 0;     // receiver: receive buffers allocated
};

class IpcDevice {
 public:
  virtual ~IpcDevice() = default;
  virtual IpcKind kind() const = 0;
  // The device a receive buffer is on (the calling thread's), -1 for host
  // memory: what the tensor made over it says.
  virtual int current_device() const = 0;
  // Makes `device` the calling thread's (the receiving stage's GPU).
  virtual void UseDevice(int device) {}

  // Sender: `bytes` of memory a peer can map by `handle`, outside any
  // caching allocator (so it stays put while mapped).
  virtual absl::StatusOr<void*> Export(uint64_t bytes, IpcHandle* handle) = 0;
  virtual void Unexport(void* region) = 0;
  // Sender: an interprocess event (no timing) a peer can open by `handle`.
  virtual absl::StatusOr<void*> CreateEvent(IpcHandle* handle) = 0;
  virtual void DestroyEvent(void* event) = 0;
  // Sender: copies `bytes` from `src` (host or device) to `dst` on the
  // copying stream, after the work already queued for the tensors.
  virtual absl::Status Copy(void* dst, const void* src, uint64_t bytes) = 0;
  // Sender: `event` fires once the copies queued before it are done.
  virtual absl::Status Record(void* event) = 0;

  // Receiver: a peer's region and event, by their handles.
  virtual absl::StatusOr<void*> Map(const IpcHandle& handle) = 0;
  virtual void Unmap(void* region) = 0;
  virtual absl::StatusOr<void*> OpenEvent(const IpcHandle& handle) = 0;
  virtual void CloseEvent(void* event) = 0;
  // Receiver: later copies on the copying stream wait for `event`.
  virtual absl::Status Wait(void* event) = 0;
  // Receiver: until the copies queued so far are done.
  virtual absl::Status Synchronize() = 0;
  // Receiver: a receive buffer on current_device().
  virtual void* Allocate(uint64_t bytes) = 0;
  virtual void Free(void* buffer) = 0;

  IpcCounts counts() const;

 protected:
  // Kept by the implementations as they allocate and release.
  struct Counters {
    std::atomic<int> exported_regions{0}, mapped_regions{0}, events{0},
        opened_events{0}, local_buffers{0};
  };
  Counters counters_;
};

// A GPU this process sees: its UUID, and those of the GPUs it can map.
struct GpuIdentity {
  std::string uuid;
  std::vector<std::string> peers;
};
// Every GPU this process sees, in CUDA's order (none without CUDA).
std::vector<GpuIdentity> VisibleGpus();

// The CUDA runtime's, or null in a build without CUDA or on a host where
// it sees no GPU (then `why` says which).
IpcDevice* CudaIpcDevice(std::string* why = nullptr);
// The host stand-in (one per process).
IpcDevice& HostIpcDevice();
// The implementation of `kind`, or null where this process has none.
IpcDevice* IpcDeviceOf(IpcKind kind);

}  // namespace petra::link

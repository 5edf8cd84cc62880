// A stage server's copies between host payloads and its device, off the
// compute path (issue 17, item 3): a received payload is staged in pinned
// host memory and goes to the device on a copy stream of its own while the
// stage computes the micro-batch before it; an outgoing tensor comes back to
// pinned memory on that stream while the stage computes the next one. The
// stage computes on a stream of its own too, and events order the three:
// nothing is copied before the compute that made it, nothing is computed
// before the copy that brings it. On the CPU every call is a no-op that
// leaves the tensors as they are (the CPU path's zero-copy receive holds).
//
// Device-generic (c10 streams and events): it compiles into the CPU build,
// where none of it is taken, and runs on any device torch has streams for.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace c10 {
class Event;
}  // namespace c10

namespace petra::engine {

// Copies in flight: the event after their last one, and the device tensors
// they fill (to the device). Empty (and every call a no-op) when nothing was
// copied.
class Transfer {
 public:
  Transfer() = default;
  Transfer(std::shared_ptr<c10::Event> done, std::vector<at::Tensor> device,
           c10::Stream copy_stream);
  bool empty() const { return done_ == nullptr; }

  // On the thread that computes with the copied tensors: its current stream
  // waits for the copies, and takes over the tensors' memory (the caching
  // allocator would otherwise give it back to the copy stream as soon as
  // the tensors die, while that stream's reads or the compute's may still
  // be queued).
  void Adopt() const;
  // Blocks the calling thread until the copies are done (a sender, before
  // it encodes the host tensors they filled).
  void Wait() const;
  // Whether the copies are done (tests; never blocks).
  bool done() const;

 private:
  std::shared_ptr<c10::Event> done_;
  std::vector<at::Tensor> device_;
  std::optional<c10::Stream> copy_stream_;
};

class DeviceTransfer {
 public:
  // `device`: stage `stage`'s (errors name it). Streams are taken from the
  // device's pool here.
  DeviceTransfer(c10::Device device, int stage);
  DeviceTransfer(const DeviceTransfer&) = delete;
  DeviceTransfer& operator=(const DeviceTransfer&) = delete;

  const c10::Device& device() const { return device_; }
  // False on the CPU: every call below returns at once.
  bool on_device() const { return !device_.is_cpu(); }

  // Makes the stage's compute stream the calling thread's current stream on
  // the device, for good (the stage's executor, once, before it builds the
  // stage: its weights then arrive on the stream that uses them).
  void UseComputeStreamOnThisThread() const;

  // From any thread: replaces each defined host tensor in `tensors` with its
  // copy on the device, queued on the copy stream from pinned host memory
  // (one host copy into it, the one the driver would make into its own
  // staging buffer for pageable memory). Tensors already on the device and
  // undefined ones are left alone. RESOURCE_EXHAUSTED, naming the stage
  // and "receiving micro-batch `micro_batch`", when the device or pinned
  // memory is out.
  absl::StatusOr<Transfer> ToDevice(const std::vector<at::Tensor*>& tensors,
                                    uint64_t micro_batch) const;

  // On the computing thread: replaces each defined device tensor in
  // `tensors` with a pinned host tensor that the copy stream fills once the
  // calling thread's stream has computed it; that stream goes on at once.
  // Wait() on the result before reading the host tensors. Errors name
  // "sending micro-batch `micro_batch`".
  absl::StatusOr<Transfer> ToHost(const std::vector<at::Tensor*>& tensors,
                                  uint64_t micro_batch) const;

  // On the computing thread: a Transfer whose Wait() returns once the
  // calling thread's stream has computed what it queued so far, the
  // tensors left where they are (a data channel that copies device to
  // device, cuda_ipc, reads them then). Empty on the CPU.
  absl::StatusOr<Transfer> Computed(uint64_t micro_batch) const;

 private:
  const c10::Device device_;
  const int stage_;
  std::optional<c10::Stream> copy_stream_, compute_stream_;
};

}  // namespace petra::engine

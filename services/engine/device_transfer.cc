#include "services/engine/device_transfer.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/engine/torch_guard.h"

namespace petra::engine {
namespace {

const c10::impl::DeviceGuardImplInterface& Impl(c10::Device device) {
  return *c10::impl::getDeviceGuardImpl(device.type());
}

// The memory of `t` is in use by `stream` until what that stream has queued
// so far is done: the caching allocator will not hand it out again before.
void InUseBy(const at::Tensor& t, const c10::Stream& stream) {
  Impl(stream.device()).recordDataPtrOnStream(t.storage().data_ptr(), stream);
}

// "cuda" names the current GPU: the index makes it comparable with tensors'.
c10::Device Indexed(c10::Device device) {
  if (device.is_cpu() || device.has_index()) return device;
  return Impl(device).getDevice();
}

}  // namespace

Transfer::Transfer(std::shared_ptr<c10::Event> done,
                   std::vector<at::Tensor> device, c10::Stream copy_stream)
    : done_(std::move(done)),
      device_(std::move(device)),
      copy_stream_(copy_stream) {}

void Transfer::Adopt() const {
  if (empty()) return;
  const c10::Stream current =
      Impl(copy_stream_->device()).getStream(copy_stream_->device());
  done_->block(current);
  for (const at::Tensor& t : device_) InUseBy(t, current);
}

void Transfer::Wait() const {
  if (empty()) return;
  // c10::Event has no blocking wait in every torch we build against; a
  // CUDA event's own wait spins the same way by default.
  for (int spins = 0; !done_->query(); ++spins) {
    if (spins < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

bool Transfer::done() const { return empty() || done_->query(); }

DeviceTransfer::DeviceTransfer(c10::Device device, int stage)
    : device_(Indexed(device)), stage_(stage) {
  if (!on_device()) return;
  copy_stream_ = Impl(device_).getStreamFromGlobalPool(device_);
  compute_stream_ = Impl(device_).getStreamFromGlobalPool(device_);
}

void DeviceTransfer::UseComputeStreamOnThisThread() const {
  if (!on_device()) return;
  Impl(device_).exchangeStream(*compute_stream_);
}

absl::StatusOr<Transfer> DeviceTransfer::ToDevice(
    const std::vector<at::Tensor*>& tensors, uint64_t micro_batch) const {
  if (!on_device()) return Transfer();  // no work on the CPU's hot path
  const std::string what = absl::StrCat("receiving micro-batch ", micro_batch);
  return Guard(stage_, what, [&]() -> absl::StatusOr<Transfer> {
    std::vector<at::Tensor> moved;
    c10::StreamGuard on_copy(*copy_stream_);
    for (at::Tensor* t : tensors) {
      if (!t->defined() || !t->device().is_cpu()) continue;
      // Pinned memory lets the copy run asynchronously (from pageable
      // memory the driver stages it itself, synchronously). The caching
      // host allocator keeps this buffer until the copy stream is done
      // with it.
      at::Tensor pinned =
          at::empty(t->sizes(), t->options().pinned_memory(true),
                    at::MemoryFormat::Contiguous);
      pinned.copy_(*t);
      *t = pinned.to(device_, /*non_blocking=*/true);
      moved.push_back(*t);
    }
    if (moved.empty()) return Transfer();
    auto done = std::make_shared<c10::Event>(device_.type());
    done->record(*copy_stream_);
    return Transfer(std::move(done), std::move(moved), *copy_stream_);
  });
}

absl::StatusOr<Transfer> DeviceTransfer::ToHost(
    const std::vector<at::Tensor*>& tensors, uint64_t micro_batch) const {
  if (!on_device()) return Transfer();
  const std::string what = absl::StrCat("sending micro-batch ", micro_batch);
  return Guard(stage_, what, [&]() -> absl::StatusOr<Transfer> {
    bool any = false;
    for (at::Tensor* t : tensors) any |= t->defined() && !t->is_cpu();
    if (!any) return Transfer();
    // The copies start after everything the computing stream has queued:
    // the tensors' own computation included.
    const c10::Stream computing = Impl(device_).getStream(device_);
    c10::Event computed(device_.type());
    computed.record(computing);
    computed.block(*copy_stream_);
    c10::StreamGuard on_copy(*copy_stream_);
    for (at::Tensor* t : tensors) {
      if (!t->defined() || t->is_cpu()) continue;
      at::Tensor host = at::empty(
          t->sizes(), t->options().device(at::kCPU).pinned_memory(true),
          at::MemoryFormat::Contiguous);
      host.copy_(*t, /*non_blocking=*/true);
      // The computing stream may free the tensor as soon as this returns.
      InUseBy(*t, *copy_stream_);
      *t = std::move(host);
    }
    auto done = std::make_shared<c10::Event>(device_.type());
    done->record(*copy_stream_);
    // No device tensors kept: the allocator knows the copy stream reads them.
    return Transfer(std::move(done), {}, *copy_stream_);
  });
}

absl::StatusOr<Transfer> DeviceTransfer::Computed(uint64_t micro_batch) const {
  if (!on_device()) return Transfer();
  const std::string what = absl::StrCat("sending micro-batch ", micro_batch);
  return Guard(stage_, what, [&]() -> absl::StatusOr<Transfer> {
    auto done = std::make_shared<c10::Event>(device_.type());
    done->record(Impl(device_).getStream(device_));
    return Transfer(std::move(done), {}, *copy_stream_);
  });
}

}  // namespace petra::engine

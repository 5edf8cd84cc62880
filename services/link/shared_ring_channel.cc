#include "services/link/shared_ring_channel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "services/link/ipc_device.h"
#include "services/link/payload_layout.h"
#include "services/wire/tensor_validation.h"

namespace petra::link {

SharedRingPlacer::SharedRingPlacer(std::function<absl::Status()> keep_going,
                                   int slots, bool may_fall_back,
                                   uint64_t max_ring_bytes, IpcDevice* device,
                                   int cuda_device)
    : keep_going_(std::move(keep_going)),
      slots_(slots),
      may_fall_back_(may_fall_back),
      max_ring_bytes_(max_ring_bytes),
      device_(device),
      cuda_device_(cuda_device) {}

SharedRingPlacer::~SharedRingPlacer() = default;

absl::StatusOr<std::vector<petra::v1::SlotRef>> SharedRingPlacer::Place(
    const std::vector<wire::PayloadPiece>& pieces) {
  if (cancelled_) return absl::CancelledError("the link was cancelled");
  // Nothing to carry (a message of directional derivatives only): a slot
  // would be published that no message names, and never freed.
  if (pieces.empty()) return std::vector<petra::v1::SlotRef>();
  // The stage's GPU, whichever thread sends: its ring and copies go there.
  if (device_ != nullptr && cuda_device_ >= 0) device_->UseDevice(cuda_device_);
  if (device_ == nullptr) {
    for (const wire::PayloadPiece& p : pieces) {
      if (p.device >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a tensor on cuda:", p.device,
            " given to shared memory, which carries host memory only"));
      }
    }
  }
  const PayloadLayout layout = LayOut(pieces);
  const uint64_t total = layout.total;
  // Outgrown rings go once the receiver has read all they hold.
  old_.erase(std::remove_if(old_.begin(), old_.end(),
                            [](const Ring& r) { return r.control()->Idle(); }),
             old_.end());
  if (ring_.control() == nullptr || ring_.capacity() < total) {
    if (no_room_ > 0 && total >= no_room_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no ", name(), " ring of ", slots_, " slots of ", total,
                       " bytes could be made (tried before)"));
    }
    const uint64_t slot_bytes = std::max<uint64_t>(total, kPayloadAlign);
    Ring made;
    absl::Status status;
    if (max_ring_bytes_ > 0 && slot_bytes * slots_ > max_ring_bytes_) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("a ring of ", slots_, " slots of ", slot_bytes,
                       " bytes exceeds the cap of ", max_ring_bytes_));
    } else if (device_ != nullptr) {
      auto d = DeviceSlots::Create(*device_, slots_, slot_bytes);
      status = d.status();
      if (d.ok()) made.device = std::move(*d);
    } else {
      auto h = SharedRing::Create(slots_, slot_bytes);
      status = h.status();
      if (h.ok()) made.host = std::move(*h);
    }
    if (!status.ok()) {
      if (absl::IsResourceExhausted(status)) no_room_ = total;
      return status;
    }
    if (ring_.control() != nullptr) old_.push_back(std::move(ring_));
    ring_ = std::move(made);
  }
  SharedRing& control = *ring_.control();
  absl::StatusOr<SharedRing::Lease> lease =
      control.Acquire([this]() -> absl::Status {
        if (cancelled_) return absl::CancelledError("the link was cancelled");
        return keep_going_ ? keep_going_() : absl::OkStatus();
      });
  if (!lease.ok()) return lease.status();
  if (ring_.device != nullptr) {
    // The slot is not published: the receiver never sees it, and the next
    // Acquire takes the next slot (this one stays free).
    if (absl::Status s = ring_.device->Write(*lease, pieces, layout); !s.ok()) {
      return s;
    }
  } else {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].bytes > 0) {
        std::memcpy(lease->data + layout.offsets[i], pieces[i].data,
                    pieces[i].bytes);
      }
    }
  }
  std::vector<petra::v1::SlotRef> refs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    petra::v1::SlotRef& r = refs.emplace_back();
    r.set_ring(control.name());
    r.set_index(lease->index);
    r.set_offset(layout.offsets[i]);
    r.set_sequence(lease->sequence);
  }
  control.Publish(*lease);
  return refs;
}

BufferPool::~BufferPool() {
  for (const auto& [capacity, data] : free_) Release(data);
}

void BufferPool::Release(void* data) {
  if (device_ != nullptr) {
    device_->Free(data);
  } else {
    std::free(data);
  }
}

std::shared_ptr<void> BufferPool::Take(uint64_t bytes) {
  const uint64_t want = std::max<uint64_t>(bytes, 1);
  void* data = nullptr;
  uint64_t capacity = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest free buffer that fits and wastes at most half of itself.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->first >= want && it->first / 2 <= want &&
          (best == free_.end() || it->first < best->first)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      std::tie(capacity, data) = *best;
      free_.erase(best);
    }
  }
  if (data == nullptr) {
    capacity = AlignedBytes(want);
    data = device_ != nullptr ? device_->Allocate(capacity)
                              : std::aligned_alloc(kPayloadAlign, capacity);
    if (data == nullptr) return nullptr;
  }
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<void>(
      data, [self, capacity](void* p) { self->Give(capacity, p); });
}

void BufferPool::Give(uint64_t capacity, void* data) {
  // A device buffer is not reused: the tensor over it dies on the thread
  // that computes with it while its kernels may still be queued on a stream
  // this pool cannot see, and a copy into it now would race them. Freeing
  // it waits for the device (cudaFree does).
  if (device_ != nullptr) {
    Release(data);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kMaxFree) {
      free_.emplace_back(capacity, data);
      return;
    }
  }
  Release(data);
}

int BufferPool::free_buffers() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

SharedRingFetcher::SharedRingFetcher(int cuda_device)
    : cuda_device_(cuda_device) {}

SharedRingFetcher::~SharedRingFetcher() = default;

BufferPool& SharedRingFetcher::Pool(IpcDevice* device) {
  std::shared_ptr<BufferPool>& pool = pools_[device];
  if (pool == nullptr) pool = std::make_shared<BufferPool>(device);
  return *pool;
}

absl::StatusOr<SharedRingFetcher::Opened*> SharedRingFetcher::Ring(
    const std::string& name) {
  if (auto it = rings_.find(name); it != rings_.end()) return &it->second;
  absl::StatusOr<std::unique_ptr<SharedRing>> opened = SharedRing::Open(name);
  if (!opened.ok()) return opened.status();
  Opened ring;
  if (const uint32_t medium = (*opened)->medium(); medium != 0) {
    std::string why;
    ring.device = static_cast<IpcKind>(medium) == IpcKind::kCuda
                      ? CudaIpcDevice(&why)
                      : IpcDeviceOf(static_cast<IpcKind>(medium));
    if (ring.device == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ring ", name, " holds device memory this receiver cannot map: ",
          why.empty() ? "an unknown kind" : why));
    }
    ring.view = std::make_unique<DeviceSlotsView>(*ring.device, **opened);
  }
  ring.control = std::move(*opened);
  if (order_.size() >= kMaxRings) {
    rings_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(name);
  return &(rings_[name] = std::move(ring));
}

absl::Status SharedRingFetcher::Fetch(std::vector<Field>& fields,
                                      const wire::TensorLimits& limits) {
  absl::Status status;
  std::set<std::tuple<SharedRing*, uint32_t, uint64_t>> used;
  std::set<IpcDevice*> copying;  // devices with copies queued
  for (Field& f : fields) {
    if (f.tensor == nullptr || !f.tensor->has_slot()) continue;
    const petra::v1::SlotRef ref = f.tensor->slot();
    f.tensor->clear_slot();
    absl::StatusOr<Opened*> ring = Ring(ref.ring());
    if (!ring.ok()) {
      if (status.ok()) {
        status =
            absl::Status(ring.status().code(),
                         absl::StrCat(f.name, ": ", ring.status().message()));
      }
      continue;
    }
    SharedRing& control = *(*ring)->control;
    used.insert({&control, ref.index(), ref.sequence()});
    if (!status.ok()) continue;
    if (!f.tensor->data().empty() || f.tensor->has_chunk()) {
      status = absl::InvalidArgumentError(
          absl::StrCat(f.name, ": has both bytes and a shared-memory slot"));
      continue;
    }
    absl::StatusOr<uint64_t> bytes =
        wire::ExpectedPayloadBytes(*f.tensor, limits, f.name);
    if (!bytes.ok()) {
      status = bytes.status();
      continue;
    }
    IpcDevice* device = (*ring)->device;
    // The stage's GPU, whichever thread the stream's reads run on.
    if (device != nullptr && cuda_device_ >= 0) device->UseDevice(cuda_device_);
    std::shared_ptr<void> buffer = Pool(device).Take(*bytes);
    if (buffer == nullptr) {
      status = absl::ResourceExhaustedError(
          absl::StrCat(f.name, ": cannot allocate ", *bytes, " bytes"));
      continue;
    }
    absl::Status copied;
    if (device != nullptr) {
      copied = (*ring)->view->CopyOut(ref.index(), ref.sequence(), ref.offset(),
                                      *bytes, buffer.get());
      copying.insert(device);
    } else {
      absl::StatusOr<const uint8_t*> at =
          control.Read(ref.index(), ref.sequence(), ref.offset(), *bytes);
      copied = at.status();
      if (at.ok() && *bytes > 0) std::memcpy(buffer.get(), *at, *bytes);
    }
    if (!copied.ok()) {
      status = absl::Status(copied.code(),
                            absl::StrCat(f.name, ": ", copied.message()));
      continue;
    }
    f.bytes = std::move(buffer);
    f.device = device != nullptr ? device->current_device() : -1;
    fetched_ += *bytes;
  }
  // A slot is freed once its bytes are out: device copies are queued.
  for (IpcDevice* device : copying) {
    if (absl::Status s = device->Synchronize(); !s.ok() && status.ok()) {
      status = s;
    }
  }
  for (const auto& [ring, index, sequence] : used) {
    ring->Free(index, sequence);
  }
  return status;
}

}  // namespace petra::link

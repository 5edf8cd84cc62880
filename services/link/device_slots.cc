#include "services/link/device_slots.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace petra::link {
namespace {

constexpr uint64_t kDescriptorMagic = 0x43534544414c5350;  // "PSLADESC"

// What every control slot holds: where its payload is, and its event.
struct SlotDescriptor {
  uint64_t magic;
  uint64_t slot_bytes;
  uint64_t region_bytes;
  uint8_t region[kIpcHandleBytes];
  uint8_t event[kIpcHandleBytes];
};
static_assert(sizeof(SlotDescriptor) <= kSlotDescriptorBytes);

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceSlots>> DeviceSlots::Create(
    IpcDevice& device, int slots, uint64_t slot_bytes) {
  slot_bytes = AlignedBytes(std::max<uint64_t>(slot_bytes, 1));
  if (slots < 1 || slots > kMaxRingSlots || slot_bytes > kMaxSlotBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a device ring needs 1 to ", kMaxRingSlots,
                     " slots of at most ", kMaxSlotBytes, " bytes"));
  }
  absl::StatusOr<std::unique_ptr<SharedRing>> control = SharedRing::Create(
      slots, kSlotDescriptorBytes, static_cast<uint32_t>(device.kind()));
  if (!control.ok()) return control.status();
  std::unique_ptr<DeviceSlots> ring(
      new DeviceSlots(device, std::move(*control), slot_bytes));
  SlotDescriptor d{};
  d.magic = kDescriptorMagic;
  d.slot_bytes = slot_bytes;
  d.region_bytes = slot_bytes * static_cast<uint64_t>(slots);
  IpcHandle handle;
  absl::StatusOr<void*> region = device.Export(d.region_bytes, &handle);
  if (!region.ok()) return region.status();
  ring->region_ = static_cast<uint8_t*>(*region);
  std::memcpy(d.region, handle.data(), kIpcHandleBytes);
  // The control slots are free and nobody reads a free slot: each
  // descriptor is written once, before the first micro-batch.
  for (int i = 0; i < slots; ++i) {
    absl::StatusOr<void*> event = device.CreateEvent(&handle);
    if (!event.ok()) return event.status();  // the destructor frees the rest
    ring->events_.push_back(*event);
    std::memcpy(d.event, handle.data(), kIpcHandleBytes);
    std::memcpy(ring->control_->SlotData(i), &d, sizeof(d));
  }
  return ring;
}

DeviceSlots::DeviceSlots(IpcDevice& device, std::unique_ptr<SharedRing> control,
                         uint64_t slot_bytes)
    : device_(device), control_(std::move(control)), slot_bytes_(slot_bytes) {}

DeviceSlots::~DeviceSlots() {
  for (void* e : events_) device_.DestroyEvent(e);
  if (region_ != nullptr) device_.Unexport(region_);
}

absl::Status DeviceSlots::Write(const SharedRing::Lease& lease,
                                const std::vector<wire::PayloadPiece>& pieces,
                                const PayloadLayout& layout) {
  if (layout.total > slot_bytes_) {
    return absl::InternalError(absl::StrCat(
        "a payload of ", layout.total, " bytes in a slot of ", slot_bytes_));
  }
  uint8_t* slot = region_ + lease.index * slot_bytes_;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].bytes == 0) continue;
    if (absl::Status s = device_.Copy(slot + layout.offsets[i], pieces[i].data,
                                      pieces[i].bytes);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = device_.Record(events_[lease.index]); !s.ok()) return s;
  // Done before the slot is published and the tensors are let go: their
  // memory is their allocator's to reuse on a stream the copy is not on.
  return device_.Synchronize();
}

DeviceSlotsView::DeviceSlotsView(IpcDevice& device, const SharedRing& control)
    : device_(device), control_(control), events_(control.slots(), nullptr) {}

DeviceSlotsView::~DeviceSlotsView() {
  for (void* e : events_) {
    if (e != nullptr) device_.CloseEvent(e);
  }
  if (region_ != nullptr) device_.Unmap(region_);
}

absl::StatusOr<void*> DeviceSlotsView::Event(uint32_t index,
                                             uint64_t sequence) {
  if (index < events_.size() && events_[index] != nullptr) {
    return events_[index];
  }
  absl::StatusOr<const uint8_t*> at =
      control_.Read(index, sequence, 0, sizeof(SlotDescriptor));
  if (!at.ok()) return at.status();
  SlotDescriptor d;
  std::memcpy(&d, *at, sizeof(d));
  const std::string ring = control_.name();
  if (d.magic != kDescriptorMagic || d.slot_bytes == 0 ||
      d.slot_bytes > kMaxSlotBytes ||
      d.region_bytes !=
          d.slot_bytes * static_cast<uint64_t>(control_.slots())) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", index, " of ring ", ring,
                     " holds no valid device descriptor"));
  }
  IpcHandle region;
  std::memcpy(region.data(), d.region, kIpcHandleBytes);
  if (region_ == nullptr) {
    absl::StatusOr<void*> mapped = device_.Map(region);
    if (!mapped.ok()) {
      return absl::Status(mapped.status().code(),
                          absl::StrCat("ring ", ring,
                                       ": cannot map its device "
                                       "memory: ",
                                       mapped.status().message()));
    }
    region_ = static_cast<uint8_t*>(*mapped);
    region_handle_ = region;
    slot_bytes_ = d.slot_bytes;
  } else if (region != region_handle_ || d.slot_bytes != slot_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot ", index, " of ring ", ring, " names another region"));
  }
  IpcHandle event;
  std::memcpy(event.data(), d.event, kIpcHandleBytes);
  absl::StatusOr<void*> opened = device_.OpenEvent(event);
  if (!opened.ok()) return opened.status();
  events_[index] = *opened;
  return *opened;
}

absl::Status DeviceSlotsView::CopyOut(uint32_t index, uint64_t sequence,
                                      uint64_t offset, uint64_t bytes,
                                      void* dst) {
  // The slot's state and sequence, checked as shm checks them.
  absl::StatusOr<const uint8_t*> held = control_.Read(index, sequence, 0, 0);
  if (!held.ok()) return held.status();
  absl::StatusOr<void*> event = Event(index, sequence);
  if (!event.ok()) return event.status();
  if (offset > slot_bytes_ || bytes > slot_bytes_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        bytes, " bytes at ", offset, " overrun slot ", index, " of ring ",
        control_.name(), " (", slot_bytes_, " bytes of device memory)"));
  }
  if (absl::Status s = device_.Wait(*event); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  return device_.Copy(dst, region_ + index * slot_bytes_ + offset, bytes);
}

}  // namespace petra::link

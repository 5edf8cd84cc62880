#include "services/link/shared_ring_channel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "services/link/payload_layout.h"
#include "services/wire/tensor_validation.h"

namespace petra::link {

SharedRingPlacer::SharedRingPlacer(std::function<absl::Status()> keep_going,
                                   int slots, bool may_fall_back,
                                   uint64_t max_ring_bytes)
    : keep_going_(std::move(keep_going)),
      slots_(slots),
      may_fall_back_(may_fall_back),
      max_ring_bytes_(max_ring_bytes) {}

absl::StatusOr<std::vector<petra::v1::SlotRef>> SharedRingPlacer::Place(
    const std::vector<PayloadPiece>& pieces) {
  if (cancelled_) return absl::CancelledError("the link was cancelled");
  // Nothing to carry (a message of directional derivatives only): a slot
  // would be published that no message names, and never freed.
  if (pieces.empty()) return std::vector<petra::v1::SlotRef>();
  const PayloadLayout layout = LayOut(pieces);
  const uint64_t total = layout.total;
  // Outgrown rings go once the receiver has read all they hold.
  old_.erase(std::remove_if(old_.begin(), old_.end(),
                            [](const std::unique_ptr<SharedRing>& r) {
                              return r->Idle();
                            }),
             old_.end());
  if (ring_ == nullptr || ring_->slot_bytes() < total) {
    if (no_room_ > 0 && total >= no_room_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no shared-memory ring of ", slots_, " slots of ", total,
                       " bytes could be made (tried before)"));
    }
    const uint64_t slot_bytes = std::max<uint64_t>(total, kPayloadAlign);
    absl::StatusOr<std::unique_ptr<SharedRing>> made =
        max_ring_bytes_ > 0 && slot_bytes * slots_ > max_ring_bytes_
            ? absl::ResourceExhaustedError(
                  absl::StrCat("a ring of ", slots_, " slots of ", slot_bytes,
                               " bytes exceeds the cap of ", max_ring_bytes_))
            : SharedRing::Create(slots_, slot_bytes);
    if (!made.ok()) {
      if (absl::IsResourceExhausted(made.status())) no_room_ = total;
      return made.status();
    }
    if (ring_ != nullptr) old_.push_back(std::move(ring_));
    ring_ = std::move(*made);
  }
  absl::StatusOr<SharedRing::Lease> lease =
      ring_->Acquire([this]() -> absl::Status {
        if (cancelled_) return absl::CancelledError("the link was cancelled");
        return keep_going_ ? keep_going_() : absl::OkStatus();
      });
  if (!lease.ok()) return lease.status();
  std::vector<petra::v1::SlotRef> refs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PayloadPiece& p = pieces[i];
    if (p.bytes > 0) {
      std::memcpy(lease->data + layout.offsets[i], p.data, p.bytes);
    }
    petra::v1::SlotRef& r = refs.emplace_back();
    r.set_ring(ring_->name());
    r.set_index(lease->index);
    r.set_offset(layout.offsets[i]);
    r.set_sequence(lease->sequence);
  }
  ring_->Publish(*lease);
  return refs;
}

BufferPool::~BufferPool() {
  for (const auto& [capacity, data] : free_) std::free(data);
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
    data = std::aligned_alloc(kPayloadAlign, capacity);
    if (data == nullptr) return nullptr;
  }
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<void>(
      data, [self, capacity](void* p) { self->Give(capacity, p); });
}

void BufferPool::Give(uint64_t capacity, void* data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kMaxFree) {
      free_.emplace_back(capacity, data);
      return;
    }
  }
  std::free(data);
}

int BufferPool::free_buffers() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

SharedRingFetcher::SharedRingFetcher()
    : pool_(std::make_shared<BufferPool>()) {}

SharedRingFetcher::~SharedRingFetcher() = default;

absl::StatusOr<SharedRing*> SharedRingFetcher::Ring(const std::string& name) {
  if (auto it = rings_.find(name); it != rings_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<SharedRing>> opened = SharedRing::Open(name);
  if (!opened.ok()) return opened.status();
  if (order_.size() >= kMaxRings) {
    rings_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(name);
  SharedRing* ring = opened->get();
  rings_[name] = std::move(*opened);
  return ring;
}

absl::Status SharedRingFetcher::Fetch(std::vector<Field>& fields,
                                      const wire::TensorLimits& limits) {
  absl::Status status;
  std::set<std::tuple<SharedRing*, uint32_t, uint64_t>> used;
  for (Field& f : fields) {
    if (f.tensor == nullptr || !f.tensor->has_slot()) continue;
    const petra::v1::SlotRef ref = f.tensor->slot();
    f.tensor->clear_slot();
    absl::StatusOr<SharedRing*> ring = Ring(ref.ring());
    if (!ring.ok()) {
      if (status.ok()) {
        status =
            absl::Status(ring.status().code(),
                         absl::StrCat(f.name, ": ", ring.status().message()));
      }
      continue;
    }
    used.insert({*ring, ref.index(), ref.sequence()});
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
    absl::StatusOr<const uint8_t*> at =
        (*ring)->Read(ref.index(), ref.sequence(), ref.offset(), *bytes);
    if (!at.ok()) {
      status = absl::InvalidArgumentError(
          absl::StrCat(f.name, ": ", at.status().message()));
      continue;
    }
    std::shared_ptr<void> buffer = pool_->Take(*bytes);
    if (buffer == nullptr) {
      status = absl::ResourceExhaustedError(
          absl::StrCat(f.name, ": cannot allocate ", *bytes, " bytes"));
      continue;
    }
    if (*bytes > 0) std::memcpy(buffer.get(), *at, *bytes);
    f.bytes = std::move(buffer);
    fetched_ += *bytes;
  }
  for (const auto& [ring, index, sequence] : used) {
    ring->Free(index, sequence);
  }
  return status;
}

}  // namespace petra::link

#include "services/link/bulk_inbox.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace petra::link {

BulkInbox& BulkInbox::Global() {
  static BulkInbox* const inbox = new BulkInbox();
  return *inbox;
}

BulkInbox::BulkInbox() : pool_(std::make_shared<BufferPool>()) {}

absl::StatusOr<std::shared_ptr<uint8_t>> BulkInbox::Reserve(
    uint64_t link, uint64_t sequence, uint64_t total, uint64_t payload,
    uint64_t offset, uint64_t bytes) {
  if (total == 0 || total > kMaxPayloadBytes || payload > total ||
      offset > total || bytes > total - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("bulk frame of micro-batch ", sequence, ": ", bytes,
                     " bytes at ", offset, " do not fit a payload of ", total,
                     " bytes (at most ", kMaxPayloadBytes, ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Link& l = links_[link];
  auto it = l.payloads.find(sequence);
  if (it == l.payloads.end()) {
    if (static_cast<int>(l.payloads.size()) >= kMaxHeldPerLink) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "bulk link holds ", kMaxHeldPerLink,
          " micro-batches whose messages never came: the sender runs ahead "
          "of its credits"));
    }
    if (const uint64_t held = HeldBytesLocked(); held + total > max_held_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the bulk channel would hold ", held + total,
          " bytes of payloads waiting for their messages, past its limit of ",
          max_held_, " bytes (the stage server's --max-receive-bytes)"));
    }
    std::shared_ptr<void> buffer = pool_->Take(total);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", total, " bytes for micro-batch ",
                       sequence, "'s payload"));
    }
    it =
        l.payloads
            .emplace(sequence, Payload{std::move(buffer), total, payload, 0, 0})
            .first;
  }
  Payload& p = it->second;
  if (p.total != total || p.payload != payload ||
      p.reserved + bytes > payload) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bulk frame of micro-batch ", sequence, " disagrees with its others (",
        total, " bytes in all, not ", p.total, "; or more bytes than that)"));
  }
  p.reserved += bytes;
  return std::shared_ptr<uint8_t>(
      p.buffer, static_cast<uint8_t*>(p.buffer.get()) + offset);
}

void BulkInbox::Arrived(uint64_t link, uint64_t sequence, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto l = links_.find(link);
  if (l == links_.end()) return;
  auto it = l->second.payloads.find(sequence);
  if (it != l->second.payloads.end()) it->second.arrived += bytes;
}

absl::StatusOr<std::pair<std::shared_ptr<const uint8_t>, uint64_t>>
BulkInbox::Take(uint64_t link, uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  auto l = links_.find(link);
  auto it = l == links_.end() ? std::map<uint64_t, Payload>::iterator()
                              : l->second.payloads.find(sequence);
  if (l == links_.end() || it == l->second.payloads.end()) {
    return absl::NotFoundError(absl::StrCat(
        "micro-batch ", sequence, " of bulk link ", link,
        " never arrived here (a sender on another host cannot reach this "
        "server's BulkService, or its link ended)"));
  }
  Payload p = std::move(it->second);
  l->second.payloads.erase(it);
  if (p.arrived != p.payload) {
    return absl::FailedPreconditionError(
        absl::StrCat("micro-batch ", sequence, " of bulk link ", link, ": ",
                     p.arrived, " of ", p.payload, " bytes arrived"));
  }
  return std::pair{std::static_pointer_cast<const uint8_t>(p.buffer), p.total};
}

void BulkInbox::Opened(uint64_t link) {
  std::lock_guard<std::mutex> lock(mu_);
  ++links_[link].streams;
}

void BulkInbox::Closed(uint64_t link) {
  std::map<uint64_t, Payload> dropped;  // freed after the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto l = links_.find(link);
  if (l == links_.end() || --l->second.streams > 0) return;
  dropped.swap(l->second.payloads);
  links_.erase(l);
}

void BulkInbox::SetMaxHeldBytes(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_held_ = bytes;
}

uint64_t BulkInbox::held_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return HeldBytesLocked();
}

uint64_t BulkInbox::HeldBytesLocked() const {
  uint64_t bytes = 0;
  for (const auto& [id, l] : links_) {
    for (const auto& [seq, p] : l.payloads) bytes += p.total;
  }
  return bytes;
}

int BulkInbox::held_micro_batches() {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [id, l] : links_) n += static_cast<int>(l.payloads.size());
  return n;
}

}  // namespace petra::link

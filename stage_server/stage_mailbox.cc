#include "stage_server/stage_mailbox.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "services/wire/status_map.h"

namespace petra::stage_server {

petra::v1::StreamReply CreditReply(uint32_t n) {
  petra::v1::StreamReply r;
  r.mutable_credit()->set_micro_batches(n);
  return r;
}

petra::v1::StreamReply ErrorReply(uint64_t id, const absl::Status& status) {
  petra::v1::StreamReply r;
  r.mutable_error()->set_micro_batch_id(id);
  *r.mutable_error()->mutable_status() = wire::ToProtoStatus(status);
  return r;
}

StageMailbox::StageMailbox(int stage_index, int stage_count, uint32_t window,
                           schedule::ModeTraffic traffic, uint32_t credit_batch)
    : index_(stage_index),
      count_(stage_count),
      window_(window),
      traffic_(traffic),
      credit_batch_(
          window < 2 ? 1 : std::clamp<uint32_t>(credit_batch, 1, window / 2)) {}

void StageMailbox::Owe(const std::shared_ptr<ReplySink>& to, bool last,
                       DueCredits& due) {
  auto it = std::find_if(owed_.begin(), owed_.end(),
                         [&](const auto& o) { return o.first == to; });
  if (it == owed_.end()) it = owed_.insert(owed_.end(), {to, 0});
  if (++it->second < credit_batch_ && !last) return;
  due.push_back(std::move(*it));
  owed_.erase(it);
}

void StageMailbox::SendCredits(const DueCredits& due) {
  for (const auto& [to, n] : due) to->Send(CreditReply(n));
}

void StageMailbox::Repay(const std::vector<std::shared_ptr<ReplySink>>& senders,
                         int64_t id) {
  DueCredits due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool last = id + 1 >= pass_.micro_batches;
    for (const auto& sender : senders) Owe(sender, last, due);
  }
  SendCredits(due);
}

uint64_t StageMailbox::BeginPass(const PassInfo& pass) {
  // What the last pass still owes goes to its streams (dropped if they
  // ended), so a stream that lives on keeps its whole window.
  DueCredits due;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pass_ = pass;
    pass_.generation = generation = ++generation_;
    open_pass_ = true;
    next_forward_ = next_backward_ = 0;
    last_x_ = last_labels_ = last_backward_ = -1;
    forward_.clear();
    backward_.clear();
    due.swap(owed_);
  }
  SendCredits(due);
  return generation;
}

void StageMailbox::EndPass(uint64_t generation) {
  DueCredits due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation != generation_) return;
    open_pass_ = false;
    forward_.clear();
    backward_.clear();
    due.swap(owed_);
  }
  SendCredits(due);
}

void StageMailbox::Close(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  closed_why_ = why;
  owed_.clear();
  cv_.notify_all();
}

absl::Status StageMailbox::CheckId(uint64_t id, int64_t next,
                                   const char* direction) const {
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the stage is stopping (", closed_why_, ")"));
  }
  if (!open_pass_) {
    return absl::FailedPreconditionError(absl::StrCat(
        direction, " micro-batch ", id, ": stage ", index_,
        " is not running a pass (the coordinator has not started one)"));
  }
  if (id >= static_cast<uint64_t>(pass_.micro_batches)) {
    return absl::OutOfRangeError(
        absl::StrCat(direction, " micro-batch id ", id,
                     " is out of range: the pass has ", pass_.micro_batches,
                     " micro-batches (ids 0..", pass_.micro_batches - 1, ")"));
  }
  if (static_cast<int64_t>(id) < next) {
    return absl::AlreadyExistsError(absl::StrCat(direction, " micro-batch ", id,
                                                 " is a duplicate: stage ",
                                                 index_, " already took it"));
  }
  if (window_ > 0 && id >= static_cast<uint64_t>(next) + window_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        direction, " micro-batch ", id, " is beyond the credit window: stage ",
        index_, " takes micro-batch ", next, " next and grants ", window_,
        " credits"));
  }
  return absl::OkStatus();
}

absl::Status StageMailbox::CheckOrder(uint64_t id, int64_t last,
                                      const char* what) {
  if (static_cast<int64_t>(id) > last) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat(
      what, " of micro-batch ", id, " arrived out of order: micro-batch ", last,
      " came before it (ids increase in send order)"));
}

bool StageMailbox::ForwardReady(const ForwardSlot& s) const {
  return s.has_x && (index_ != count_ - 1 || s.has_labels);
}

absl::Status StageMailbox::Deliver(model::ForwardBatch p,
                                   std::shared_ptr<ReplySink> from,
                                   engine::Transfer arrival) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = p.header.micro_batch_id;
  if (absl::Status s = CheckId(id, next_forward_, "forward"); !s.ok()) return s;
  if (p.header.phase != pass_.phase) {
    return absl::FailedPreconditionError(
        absl::StrCat("forward micro-batch ", id, " is for phase ",
                     petra::v1::Phase_Name(p.header.phase), " but the pass is ",
                     petra::v1::Phase_Name(pass_.phase)));
  }
  const bool has_x = p.x.a.defined();
  const bool has_labels = p.labels.defined();
  if (!has_x && !has_labels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward micro-batch ", id, " carries neither activation nor labels"));
  }
  // Activations come from the previous stage (the coordinator's feed, -1,
  // on stage 0); labels only from the coordinator, only to the last stage.
  if (has_x && p.header.sender_stage != index_ - 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        "forward micro-batch ", id, ": activations from stage ",
        p.header.sender_stage, ", but stage ", index_, " takes them from ",
        index_ == 0 ? std::string("the coordinator (-1)")
                    : absl::StrCat("stage ", index_ - 1)));
  }
  // In some modes the labels also come with the activation to every stage
  // but the last (each has a local loss).
  const bool labels_with_x =
      traffic_.labels_with_activations && has_x && index_ < count_ - 1;
  if (has_labels && !labels_with_x &&
      (index_ != count_ - 1 || p.header.sender_stage != -1)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "forward micro-batch ", id,
        ": labels are taken only by the last stage, from the coordinator",
        traffic_.labels_with_activations
            ? " (and with the activations below it)"
            : ""));
  }
  if (!p.tangents.empty() && (!traffic_.tangents || !has_x)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward micro-batch ", id,
        traffic_.tangents ? ": tangents come only with an activation"
                          : ": carries tangents, but the job's mode is not "
                            "forward_gradient"));
  }
  auto queued = forward_.find(id);
  if (queued != forward_.end() && ((has_x && queued->second.has_x) ||
                                   (has_labels && queued->second.has_labels))) {
    return absl::AlreadyExistsError(absl::StrCat(
        "forward micro-batch ", id, " is a duplicate: it is already queued"));
  }
  if (has_x) {
    if (absl::Status s = CheckOrder(id, last_x_, "forward activation");
        !s.ok()) {
      return s;
    }
  }
  if (has_labels) {
    if (absl::Status s = CheckOrder(id, last_labels_, "labels"); !s.ok()) {
      return s;
    }
  }
  ForwardSlot& slot = forward_[id];
  if (has_x) {
    slot.batch.header = p.header;
    slot.batch.home = p.home;
    slot.batch.x = std::move(p.x);
    slot.batch.tangents = std::move(p.tangents);
    slot.has_x = true;
    last_x_ = static_cast<int64_t>(id);
    if (index_ == 0) data_sink_ = from;
  }
  if (has_labels) {
    slot.batch.labels = std::move(p.labels);
    slot.has_labels = true;
    last_labels_ = static_cast<int64_t>(id);
    if (index_ == count_ - 1) labels_sink_ = from;
  }
  slot.senders.push_back(std::move(from));
  if (!arrival.empty()) slot.arrivals.push_back(std::move(arrival));
  if (ForwardReady(slot)) cv_.notify_all();
  return absl::OkStatus();
}

absl::Status StageMailbox::Deliver(model::BackwardBatch p,
                                   std::shared_ptr<ReplySink> from,
                                   engine::Transfer arrival) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = p.header.micro_batch_id;
  if (absl::Status s = CheckId(id, next_backward_, "backward"); !s.ok())
    return s;
  if (pass_.phase == petra::v1::PHASE_EVAL) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backward micro-batch ", id, ": the pass is an evaluation"));
  }
  if (index_ == count_ - 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("backward micro-batch ", id, " from stage ",
                     p.header.sender_stage, ": stage ", index_,
                     " is the last stage and computes its own gradients"));
  }
  if (p.header.sender_stage != index_ + 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        "backward micro-batch ", id, " from stage ", p.header.sender_stage,
        ", but stage ", index_, " takes gradients from stage ", index_ + 1));
  }
  if (backward_.count(id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "backward micro-batch ", id, " is a duplicate: it is already queued"));
  }
  if (absl::Status s = CheckOrder(id, last_backward_, "gradient"); !s.ok()) {
    return s;
  }
  if (p.directional.empty() == traffic_.derivatives_down) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backward micro-batch ", id,
        traffic_.derivatives_down
            ? ": the job's mode (forward_gradient) sends directional "
              "derivatives down"
            : ": carries directional derivatives, but the job's mode is not "
              "forward_gradient"));
  }
  last_backward_ = static_cast<int64_t>(id);
  BackwardSlot& slot = backward_[id];
  slot.batch = std::move(p);
  slot.sender = std::move(from);
  slot.arrival = std::move(arrival);
  cv_.notify_all();
  return absl::OkStatus();
}

template <typename Map, typename Ready>
absl::StatusOr<typename Map::mapped_type> StageMailbox::Take(
    Map& map, int64_t id, int64_t& next, Ready ready, bool backward) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    if (closed_) return true;
    auto it = map.find(id);
    return it != map.end() && ready(it->second);
  });
  if (closed_) return absl::CancelledError(closed_why_);
  auto it = map.find(id);
  typename Map::mapped_type slot = std::move(it->second);
  map.erase(it);
  next = id + 1;
  return slot;
}

absl::StatusOr<model::ForwardBatch> StageMailbox::NextForward(int64_t id) {
  absl::StatusOr<ForwardSlot> slot = Take(
      forward_, id, next_forward_,
      [this](const ForwardSlot& s) { return ForwardReady(s); }, false);
  if (!slot.ok()) return slot.status();
  Repay(slot->senders, id);
  for (const engine::Transfer& a : slot->arrivals) a.Adopt();
  slot->batch.header.micro_batch_id = static_cast<uint64_t>(id);
  return std::move(slot->batch);
}

absl::StatusOr<model::BackwardBatch> StageMailbox::NextBackward(int64_t id) {
  absl::StatusOr<BackwardSlot> slot = Take(
      backward_, id, next_backward_, [](const BackwardSlot&) { return true; },
      true);
  if (!slot.ok()) return slot.status();
  Repay({slot->sender}, id);
  slot->arrival.Adopt();
  return std::move(slot->batch);
}

std::shared_ptr<ReplySink> StageMailbox::labels_sink() {
  std::lock_guard<std::mutex> lock(mu_);
  return labels_sink_;
}

std::shared_ptr<ReplySink> StageMailbox::data_sink() {
  std::lock_guard<std::mutex> lock(mu_);
  return data_sink_;
}

}  // namespace petra::stage_server

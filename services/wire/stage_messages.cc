#include "services/wire/stage_messages.h"

#include <torch/torch.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/wire/slot_codec.h"
#include "services/wire/tensor_codec.h"

namespace petra::wire {
namespace {

// One tensor slot of a message: its encoded chunks, in order.
struct Slot {
  std::vector<petra::v1::Tensor> chunks;
};

absl::StatusOr<Slot> Chunked(const torch::Tensor& t, uint64_t chunk_bytes) {
  Slot slot;
  if (!t.defined()) return slot;
  absl::StatusOr<std::vector<petra::v1::Tensor>> chunks =
      EncodeTensorChunks(t, chunk_bytes);
  if (!chunks.ok()) return chunks.status();
  slot.chunks = std::move(*chunks);
  return slot;
}

absl::StatusOr<std::vector<Slot>> Encoded(
    const std::vector<const torch::Tensor*>& tensors, uint64_t chunk_bytes,
    wire::PayloadPlacer* placer) {
  if (placer != nullptr) {
    absl::StatusOr<std::vector<std::vector<petra::v1::Tensor>>> placed =
        PlaceTensors(tensors, placer);
    if (placed.ok()) {
      std::vector<Slot> slots(placed->size());
      for (size_t i = 0; i < slots.size(); ++i) {
        slots[i].chunks = std::move((*placed)[i]);
      }
      return slots;
    }
    // No room in the channel: the bytes go in the message, if the job
    // allows it (transport auto).
    if (!absl::IsResourceExhausted(placed.status()) ||
        !placer->may_fall_back()) {
      return placed.status();
    }
  }
  std::vector<Slot> slots;
  for (const torch::Tensor* t : tensors) {
    absl::StatusOr<Slot> s = Chunked(*t, chunk_bytes);
    if (!s.ok()) return s.status();
    slots.push_back(std::move(*s));
  }
  return slots;
}

// Packs the slots' chunks into parts: in order, at most one chunk per slot
// per part, and at most `budget` payload bytes per part (a single chunk is
// never over budget: it was cut to size). The chunks are moved out of the
// slots into the parts later, so the pointers are mutable.
std::vector<std::vector<std::pair<int, petra::v1::Tensor*>>> Pack(
    std::vector<Slot>& slots, uint64_t budget) {
  std::vector<std::vector<std::pair<int, petra::v1::Tensor*>>> parts(1);
  uint64_t used = 0;
  for (int s = 0; s < static_cast<int>(slots.size()); ++s) {
    for (petra::v1::Tensor& c : slots[s].chunks) {
      bool has_slot = false;
      for (const auto& [slot, _] : parts.back()) has_slot |= slot == s;
      if (has_slot || (used > 0 && used + c.data().size() > budget)) {
        parts.emplace_back();
        used = 0;
      }
      parts.back().push_back({s, &c});
      used += c.data().size();
    }
  }
  return parts;
}

void SetHeader(const MicroBatchHeader& h, petra::v1::ForwardMessage* m) {
  m->set_job_id(h.job_id);
  m->set_micro_batch_id(h.micro_batch_id);
  m->set_step(h.step);
  m->set_phase(h.phase);
  m->set_sender_stage(h.sender_stage);
  m->set_epoch(h.epoch);
}

void SetHeader(const MicroBatchHeader& h, petra::v1::BackwardMessage* m) {
  m->set_job_id(h.job_id);
  m->set_micro_batch_id(h.micro_batch_id);
  m->set_step(h.step);
  m->set_sender_stage(h.sender_stage);
}

template <typename M>
MicroBatchHeader HeaderOf(const M& m) {
  MicroBatchHeader h;
  h.job_id = m.job_id();
  h.micro_batch_id = m.micro_batch_id();
  h.step = m.step();
  h.sender_stage = m.sender_stage();
  if constexpr (std::is_same_v<M, petra::v1::ForwardMessage>) {
    h.phase = m.phase();
    h.epoch = m.epoch();
  }
  return h;
}

// Shared part of both assemblers: checks the part continues the micro-batch
// being assembled, feeds each present slot, and returns whether it is the
// last part.
template <typename M>
absl::StatusOr<bool> AddPart(
    const M& m, const std::vector<petra::v1::Tensor*>& tensors,
    const std::vector<std::string>& names, const TensorLimits& limits,
    std::optional<MicroBatchHeader>& header,
    std::vector<std::optional<TensorAssembler>>& slots) {
  const std::string where = absl::StrCat("micro-batch ", m.micro_batch_id());
  if (header.has_value() && (header->micro_batch_id != m.micro_batch_id() ||
                             header->job_id != m.job_id())) {
    const uint64_t pending = header->micro_batch_id;
    header.reset();
    slots.assign(names.size(), std::nullopt);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": arrived before the last part of micro-batch ",
                     pending, " (dropped)"));
  }
  if (!header.has_value()) {
    header = HeaderOf(m);
    slots.assign(names.size(), std::nullopt);
  }
  // A later part may name more tangents than the first did.
  if (slots.size() < names.size()) slots.resize(names.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] == nullptr) continue;
    if (!slots[i].has_value()) slots[i].emplace(names[i], limits);
    if (absl::Status s = slots[i]->Add(std::move(*tensors[i])); !s.ok()) {
      header.reset();
      slots.assign(names.size(), std::nullopt);
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  }
  if (!m.last_part()) return false;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].has_value() && !slots[i]->complete()) {
      header.reset();
      slots.assign(names.size(), std::nullopt);
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", names[i], " incomplete at the last part"));
    }
  }
  return true;
}

// Decodes every assembled slot (undefined where a slot never arrived) and
// clears them for the next micro-batch.
absl::StatusOr<std::vector<torch::Tensor>> DecodeAll(
    std::vector<std::optional<TensorAssembler>>& slots,
    const std::vector<std::string>& names, const TensorLimits& limits,
    const std::string& where) {
  std::vector<torch::Tensor> out(names.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].has_value()) continue;
    absl::StatusOr<petra::v1::Tensor> whole = slots[i]->Take();
    absl::StatusOr<torch::Tensor> t =
        whole.ok() ? DecodeTensor(std::move(*whole), limits, names[i])
                   : absl::StatusOr<torch::Tensor>(whole.status());
    if (!t.ok()) {
      slots.clear();
      return absl::InvalidArgumentError(
          absl::StrCat(where, t.status().message()));
    }
    out[i] = std::move(*t);
  }
  slots.clear();
  return out;
}

// A micro-batch once its last part has arrived: its header, and its
// tensors by slot (undefined where none came), from the messages' chunks and
// the data channel alike.
struct Whole {
  MicroBatchHeader header;
  std::string where;  // "micro-batch N: ", for errors
  std::vector<torch::Tensor> tensors;
  // In a data channel's buffer when a channel brought any of them.
  model::TensorHome home = model::TensorHome::kHost;
};

// Adds one part (`tensors` are its tensor slots, null where absent): the
// whole micro-batch after its last part, nothing while parts are missing.
// After an error nothing of the micro-batch is kept.
template <typename M>
absl::StatusOr<std::optional<Whole>> AddAndDecode(
    const M& m, std::vector<petra::v1::Tensor*> tensors,
    const std::vector<std::string>& names, const TensorLimits& limits,
    wire::PayloadFetcher* fetcher, std::optional<MicroBatchHeader>& header,
    std::vector<std::optional<TensorAssembler>>& slots,
    std::vector<torch::Tensor>& fetched) {
  if (!header.has_value()) fetched.clear();
  if (absl::Status s = FetchSlotTensors(tensors, names, limits, fetcher,
                                        m.micro_batch_id(), fetched);
      !s.ok()) {
    header.reset();
    slots.clear();
    fetched.clear();
    return s;
  }
  absl::StatusOr<bool> last = AddPart(m, tensors, names, limits, header, slots);
  if (!last.ok()) {
    fetched.clear();
    return last.status();
  }
  if (!*last) return std::nullopt;
  Whole w;
  w.header = *header;
  header.reset();
  w.where = absl::StrCat("micro-batch ", w.header.micro_batch_id, ": ");
  absl::StatusOr<std::vector<torch::Tensor>> t =
      DecodeAll(slots, names, limits, w.where);
  if (!t.ok()) {
    fetched.clear();
    return t.status();
  }
  for (const torch::Tensor& f : fetched) {
    // cuda_ipc's arrive on the device.
    if (f.defined()) {
      w.home =
          f.is_cuda() ? model::TensorHome::kDevice : model::TensorHome::kSlot;
    }
  }
  if (absl::Status s = MergeFetched(fetched, *t, names, w.where); !s.ok())
    return s;
  w.tensors = std::move(*t);
  return w;
}

// The forward slots' names, with `tangents` tangents' two each.
std::vector<std::string> ForwardNames(int tangents) {
  std::vector<std::string> n = {"activation.first", "activation.second",
                                "labels"};
  for (int k = 0; k < tangents; ++k) {
    n.push_back(absl::StrCat("tangents[", k, "].first"));
    n.push_back(absl::StrCat("tangents[", k, "].second"));
  }
  return n;
}

constexpr int kForwardFixedSlots = 3;

const std::vector<std::string>& BackwardNames() {
  static const std::vector<std::string> n = {
      "activation.first", "activation.second", "gradient.first",
      "gradient.second"};
  return n;
}

// The pair's tensors that are set, as pointers the assembler may move from
// (mutable_first() would create a missing one, so presence is read first).
std::pair<petra::v1::Tensor*, petra::v1::Tensor*> Present(
    petra::v1::TensorPair* pair) {
  return {pair->has_first() ? pair->mutable_first() : nullptr,
          pair->has_second() ? pair->mutable_second() : nullptr};
}

// A stage boundary value: floating point (or int64 token ids alone, a
// language model's input to its first stage), with the micro-batch as its
// first dimension, the same in both halves of a pair. Checked here so that
// no tensor reaching the engine makes torch throw (a 0-d tensor has no
// size(0)); what a stage's blocks make of a dtype, the stage's guard says.
absl::Status CheckBoundary(const torch::Tensor& a, const torch::Tensor& b,
                           const std::string& where, const std::string& name) {
  for (const auto& [t, half] :
       {std::pair{&a, ".first"}, std::pair{&b, ".second"}}) {
    if (!t->defined()) continue;
    const bool token_ids = t->scalar_type() == torch::kInt64 && !b.defined();
    if (!t->is_floating_point() && !token_ids) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, name, half,
                       " must be floating point (or int64 token ids, "
                       "alone), not ",
                       c10::toString(t->scalar_type())));
    }
    if (t->dim() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, name, half, " needs a first (micro-batch) dimension"));
    }
  }
  if (a.defined() && b.defined() && a.size(0) != b.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, name, ".first and ", name, ".second hold ",
                     a.size(0), " and ", b.size(0), " samples"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<torch::Tensor*> TensorsOf(ForwardBatch& p) {
  std::vector<torch::Tensor*> out = {&p.x.a, &p.x.b, &p.labels};
  for (model::TensorPair& t : p.tangents) {
    out.push_back(&t.a);
    out.push_back(&t.b);
  }
  return out;
}

std::vector<torch::Tensor*> TensorsOf(BackwardBatch& p) {
  return {&p.output.a, &p.output.b, &p.grad.a, &p.grad.b};
}

absl::StatusOr<std::vector<petra::v1::ForwardMessage>> EncodeForward(
    const ForwardBatch& p, uint64_t chunk_bytes, wire::PayloadPlacer* placer) {
  if (p.tangents.size() > static_cast<size_t>(kMaxTangents)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a forward message carries at most ", kMaxTangents,
                     " tangents, not ", p.tangents.size()));
  }
  std::vector<const torch::Tensor*> tensors = {&p.x.a, &p.x.b, &p.labels};
  for (const model::TensorPair& t : p.tangents) {
    tensors.push_back(&t.a);
    tensors.push_back(&t.b);
  }
  absl::StatusOr<std::vector<Slot>> slots =
      Encoded(tensors, chunk_bytes, placer);
  if (!slots.ok()) return slots.status();
  std::vector<petra::v1::ForwardMessage> out;
  for (const auto& part : Pack(*slots, chunk_bytes)) {
    petra::v1::ForwardMessage& m = out.emplace_back();
    SetHeader(p.header, &m);
    for (const auto& [slot, chunk] : part) {
      if (slot == 0)
        *m.mutable_activation()->mutable_first() = std::move(*chunk);
      if (slot == 1)
        *m.mutable_activation()->mutable_second() = std::move(*chunk);
      if (slot == 2) *m.mutable_labels() = std::move(*chunk);
      if (slot >= kForwardFixedSlots) {
        // Tangent k sits at index k: the earlier ones stay empty pairs in
        // this part.
        const int k = (slot - kForwardFixedSlots) / 2;
        while (m.tangents_size() <= k) m.add_tangents();
        petra::v1::TensorPair* pair = m.mutable_tangents(k);
        *((slot - kForwardFixedSlots) % 2 == 0 ? pair->mutable_first()
                                               : pair->mutable_second()) =
            std::move(*chunk);
      }
    }
  }
  out.back().set_last_part(true);
  return out;
}

absl::StatusOr<std::vector<petra::v1::BackwardMessage>> EncodeBackward(
    const BackwardBatch& p, uint64_t chunk_bytes, wire::PayloadPlacer* placer) {
  absl::StatusOr<std::vector<Slot>> slots = Encoded(
      {&p.output.a, &p.output.b, &p.grad.a, &p.grad.b}, chunk_bytes, placer);
  if (!slots.ok()) return slots.status();
  std::vector<petra::v1::BackwardMessage> out;
  for (const auto& part : Pack(*slots, chunk_bytes)) {
    petra::v1::BackwardMessage& m = out.emplace_back();
    SetHeader(p.header, &m);
    if (out.size() == 1) {
      for (double d : p.directional) m.add_directional(d);
    }
    for (const auto& [slot, chunk] : part) {
      if (slot == 0)
        *m.mutable_activation()->mutable_first() = std::move(*chunk);
      if (slot == 1)
        *m.mutable_activation()->mutable_second() = std::move(*chunk);
      if (slot == 2) *m.mutable_gradient()->mutable_first() = std::move(*chunk);
      if (slot == 3)
        *m.mutable_gradient()->mutable_second() = std::move(*chunk);
    }
  }
  out.back().set_last_part(true);
  return out;
}

ForwardAssembler::ForwardAssembler(TensorLimits limits,
                                   wire::PayloadFetcher* fetcher)
    : limits_(limits), fetcher_(fetcher) {}

absl::StatusOr<std::optional<ForwardBatch>> ForwardAssembler::Add(
    petra::v1::ForwardMessage m) {
  if (m.tangents_size() > kMaxTangents) {
    header_.reset();
    slots_.clear();
    return absl::InvalidArgumentError(
        absl::StrCat("micro-batch ", m.micro_batch_id(), ": carries ",
                     m.tangents_size(), " tangents, more than ", kMaxTangents));
  }
  const int known =
      slots_.empty()
          ? 0
          : (static_cast<int>(slots_.size()) - kForwardFixedSlots) / 2;
  const std::vector<std::string> names =
      ForwardNames(std::max(known, m.tangents_size()));
  const auto activation = Present(m.mutable_activation());
  std::vector<petra::v1::Tensor*> tensors = {
      activation.first, activation.second,
      m.has_labels() ? m.mutable_labels() : nullptr};
  for (int k = 0; k < m.tangents_size(); ++k) {
    const auto pair = Present(m.mutable_tangents(k));
    tensors.push_back(pair.first);
    tensors.push_back(pair.second);
  }
  absl::StatusOr<std::optional<Whole>> whole = AddAndDecode(
      m, tensors, names, limits_, fetcher_, header_, slots_, fetched_);
  if (!whole.ok()) return whole.status();
  if (!whole->has_value()) return std::nullopt;
  ForwardBatch p;
  p.header = (*whole)->header;
  p.home = (*whole)->home;
  const std::string& where = (*whole)->where;
  std::vector<torch::Tensor>* t = &(*whole)->tensors;
  const torch::Tensor *a = &(*t)[0], *b = &(*t)[1], *labels = &(*t)[2];
  for (size_t i = kForwardFixedSlots; i < t->size(); i += 2) {
    const torch::Tensor &ta = (*t)[i], &tb = (*t)[i + 1];
    const std::string name =
        absl::StrCat("tangents[", (i - kForwardFixedSlots) / 2, "]");
    if (!ta.defined() || !a->defined() || ta.sizes() != a->sizes() ||
        tb.defined() != b->defined() ||
        (tb.defined() && tb.sizes() != b->sizes()) ||
        ta.scalar_type() != a->scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, name, " must be shaped like the activation, both halves"));
    }
    p.tangents.push_back({ta, tb});
  }
  if (!a->defined() && !labels->defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "a forward message needs activation.first or labels"));
  }
  if (b->defined() && !a->defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "activation.second without activation.first"));
  }
  if (absl::Status s = CheckBoundary(*a, *b, where, "activation"); !s.ok()) {
    return s;
  }
  if (labels->defined()) {
    // A language model's: the next token at each position, [micro-batch
    // size, tokens].
    if (labels->scalar_type() != torch::kInt64 || labels->dim() < 1 ||
        labels->dim() > 2 || (a->defined() && labels->size(0) != a->size(0))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       "labels must be int64 of shape [micro-batch size] (or "
                       "[micro-batch size, tokens])"));
    }
  }
  p.x = {*a, *b};
  p.labels = *labels;
  return p;
}

BackwardAssembler::BackwardAssembler(TensorLimits limits,
                                     wire::PayloadFetcher* fetcher)
    : limits_(limits), fetcher_(fetcher) {}

absl::StatusOr<std::optional<BackwardBatch>> BackwardAssembler::Add(
    petra::v1::BackwardMessage m) {
  const auto& names = BackwardNames();
  if (!header_.has_value()) directional_.clear();
  if (directional_.size() + m.directional_size() > kMaxTangents + 1u) {
    header_.reset();
    slots_.clear();
    directional_.clear();
    return absl::InvalidArgumentError(
        absl::StrCat("micro-batch ", m.micro_batch_id(), ": more than ",
                     kMaxTangents + 1, " directional derivatives"));
  }
  directional_.insert(directional_.end(), m.directional().begin(),
                      m.directional().end());
  const auto activation = Present(m.mutable_activation());
  const auto gradient = Present(m.mutable_gradient());
  absl::StatusOr<std::optional<Whole>> whole = AddAndDecode(
      m, {activation.first, activation.second, gradient.first, gradient.second},
      names, limits_, fetcher_, header_, slots_, fetched_);
  if (!whole.ok()) {
    directional_.clear();
    return whole.status();
  }
  if (!whole->has_value()) return std::nullopt;
  BackwardBatch p;
  p.header = (*whole)->header;
  p.home = (*whole)->home;
  const std::string& where = (*whole)->where;
  const std::vector<torch::Tensor>& t = (*whole)->tensors;
  p.directional = std::move(directional_);
  directional_.clear();
  if (!p.directional.empty()) {
    // Mode forward_gradient: the derivatives, and for a micro-batch the
    // gradient diagnostic samples, the true gradient; never an activation.
    if (t[0].defined() || t[1].defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       "a backward message carries directional derivatives or "
                       "an activation, not both"));
    }
    if (t[3].defined() && !t[2].defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "gradient.second without gradient.first"));
    }
    if (absl::Status s = CheckBoundary(t[2], t[3], where, "gradient");
        !s.ok()) {
      return s;
    }
    p.grad = {t[2], t[3]};
    return p;
  }
  if (!t[0].defined() || !t[2].defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        "a backward message needs activation.first and gradient.first "
        "(or directional derivatives)"));
  }
  for (size_t i : {0, 2}) {
    if (absl::Status s = CheckBoundary(t[i], t[i + 1], where,
                                       i == 0 ? "activation" : "gradient");
        !s.ok()) {
      return s;
    }
  }
  // Each gradient must match its activation's shape.
  for (size_t i = 0; i < 2; ++i) {
    if (t[i].defined() != t[i + 2].defined() ||
        (t[i].defined() && t[i].sizes() != t[i + 2].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, names[i + 2], " does not match the shape of ", names[i]));
    }
  }
  p.output = {t[0], t[1]};
  p.grad = {t[2], t[3]};
  return p;
}

}  // namespace petra::wire

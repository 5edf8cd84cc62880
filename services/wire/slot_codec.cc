#include "services/wire/slot_codec.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "services/wire/stage_messages.h"
#include "services/wire/tensor_codec.h"

namespace petra::wire {

absl::StatusOr<std::vector<std::vector<petra::v1::Tensor>>> PlaceTensors(
    const std::vector<const torch::Tensor*>& tensors,
    wire::PayloadPlacer* placer) {
  std::vector<std::vector<petra::v1::Tensor>> slots(tensors.size());
  std::vector<torch::Tensor> dense;  // alive until placed
  std::vector<wire::PayloadPiece> pieces;
  std::vector<size_t> owner;
  // cuda_ipc copies device to device; the others are given host memory.
  const bool keep_device = placer->takes_device_pieces();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]->defined()) continue;
    absl::StatusOr<torch::Tensor> d =
        DenseWithHeader(*tensors[i], &slots[i].emplace_back(), keep_device);
    if (!d.ok()) return d.status();
    pieces.push_back({d->data_ptr(),
                      static_cast<uint64_t>(d->numel()) * d->element_size(),
                      d->is_cuda() ? static_cast<int>(d->get_device()) : -1});
    dense.push_back(std::move(*d));
    owner.push_back(i);
  }
  if (pieces.empty()) return slots;  // nothing for the channel to carry
  absl::StatusOr<std::vector<petra::v1::SlotRef>> refs = placer->Place(pieces);
  if (!refs.ok()) return refs.status();
  for (size_t k = 0; k < owner.size(); ++k) {
    *slots[owner[k]].front().mutable_slot() = std::move((*refs)[k]);
  }
  return slots;
}

absl::Status FetchSlotTensors(std::vector<petra::v1::Tensor*>& tensors,
                              const std::vector<std::string>& names,
                              const TensorLimits& limits,
                              wire::PayloadFetcher* fetcher, uint64_t id,
                              std::vector<torch::Tensor>& fetched) {
  std::vector<wire::PayloadFetcher::Field> fields;
  std::vector<size_t> at;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] != nullptr && tensors[i]->has_slot()) {
      fields.push_back({tensors[i], names[i], nullptr});
      at.push_back(i);
    }
  }
  if (fields.empty()) return absl::OkStatus();
  const std::string where = absl::StrCat("micro-batch ", id, ": ");
  if (fetcher == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, fields.front().name,
                     " names a data-channel slot, which this receiver does "
                     "not read"));
  }
  if (absl::Status s = fetcher->Fetch(fields, limits); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(where, s.message()));
  }
  if (fetched.size() < names.size()) fetched.resize(names.size());
  for (size_t k = 0; k < fields.size(); ++k) {
    const size_t i = at[k];
    if (fetched[i].defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, names[i], " arrived twice"));
    }
    absl::StatusOr<torch::Tensor> t = TensorOverBytes(
        *tensors[i], fields[k].bytes, limits, names[i], fields[k].device);
    if (!t.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(where, t.status().message()));
    fetched[i] = std::move(*t);
    tensors[i] = nullptr;
  }
  return absl::OkStatus();
}

absl::Status MergeFetched(std::vector<torch::Tensor>& fetched,
                          std::vector<torch::Tensor>& decoded,
                          const std::vector<std::string>& names,
                          const std::string& where) {
  for (size_t i = 0; i < fetched.size() && i < decoded.size(); ++i) {
    if (!fetched[i].defined()) continue;
    if (decoded[i].defined()) {
      fetched.clear();
      return absl::InvalidArgumentError(absl::StrCat(
          where, names[i], " came both in the message and in a slot"));
    }
    decoded[i] = std::move(fetched[i]);
  }
  fetched.clear();
  return absl::OkStatus();
}

namespace {

bool HasSlot(const petra::v1::TensorPair& p) {
  return p.first().has_slot() || p.second().has_slot();
}

}  // namespace

bool CarriesSlots(const std::vector<petra::v1::ForwardMessage>& parts) {
  for (const petra::v1::ForwardMessage& m : parts) {
    if (HasSlot(m.activation()) || m.labels().has_slot()) return true;
    for (const petra::v1::TensorPair& t : m.tangents()) {
      if (HasSlot(t)) return true;
    }
  }
  return false;
}

bool CarriesSlots(const std::vector<petra::v1::BackwardMessage>& parts) {
  for (const petra::v1::BackwardMessage& m : parts) {
    if (HasSlot(m.activation()) || HasSlot(m.gradient())) return true;
  }
  return false;
}

}  // namespace petra::wire

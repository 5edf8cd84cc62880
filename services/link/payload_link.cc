#include "services/link/payload_link.h"

#include <torch/torch.h>

namespace petra::link {
namespace {

absl::StatusOr<std::vector<petra::v1::ForwardMessage>> Encode(
    const model::ForwardBatch& p, uint64_t chunk_bytes,
    wire::PayloadPlacer* channel) {
  return wire::EncodeForward(p, chunk_bytes, channel);
}

absl::StatusOr<std::vector<petra::v1::BackwardMessage>> Encode(
    const model::BackwardBatch& p, uint64_t chunk_bytes,
    wire::PayloadPlacer* channel) {
  return wire::EncodeBackward(p, chunk_bytes, channel);
}

}  // namespace

template <typename Payload, typename Message>
absl::StatusOr<typename PayloadLink<Payload, Message>::Sent>
PayloadLink<Payload, Message>::Send(Payload& payload) const {
  absl::StatusOr<std::vector<Message>> parts =
      Encode(payload, chunk_bytes_, channel_.get());
  if (!parts.ok()) return parts.status();
  // The messages' own bytes, and those a data channel carried beside them.
  Sent sent;
  const bool beside = wire::CarriesSlots(*parts);
  sent.transport = beside ? channel_->name() : "grpc";
  for (const Message& m : *parts) {
    sent.bytes += static_cast<int64_t>(m.ByteSizeLong());
  }
  if (beside) {
    for (const torch::Tensor* t : wire::TensorsOf(payload)) {
      if (t->defined()) sent.bytes += t->numel() * t->element_size();
    }
  }
  if (absl::Status s = send_(*parts); !s.ok()) return s;
  return sent;
}

template class PayloadLink<model::ForwardBatch, petra::v1::ForwardMessage>;
template class PayloadLink<model::BackwardBatch, petra::v1::BackwardMessage>;

}  // namespace petra::link

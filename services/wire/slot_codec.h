// The codec's side of the data channels (data_channel.h): tensors placed
// in a channel as headers with a SlotRef, fetched back into whole tensors.
// Used by stage_messages.cc, which does the chunked encoding and the
// micro-batch assembly around them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/tensor.pb.h"
#include "services/model/tensor_pair.h"
#include "services/wire/data_channel.h"
#include "services/wire/tensor_limits.h"

namespace petra::wire {

// The tensors' headers, their bytes in `placer`'s data channel: for each
// tensor, one header carrying a SlotRef and no bytes (none for an
// undefined tensor). RESOURCE_EXHAUSTED when the channel has no room.
absl::StatusOr<std::vector<std::vector<petra::v1::Tensor>>> PlaceTensors(
    const std::vector<const torch::Tensor*>& tensors,
    wire::PayloadPlacer* placer);

// Brings in the tensors of a message part that a data channel carries:
// each becomes a whole tensor in `fetched` (by slot), and its entry in
// `tensors` null, so that the chunk assembly skips it. Errors name the
// micro-batch `id` and the field.
absl::Status FetchSlotTensors(std::vector<petra::v1::Tensor*>& tensors,
                              const std::vector<std::string>& names,
                              const TensorLimits& limits,
                              wire::PayloadFetcher* fetcher, uint64_t id,
                              std::vector<torch::Tensor>& fetched);

// The tensors a data channel brought, put in their slots of `decoded`
// (where the message's own chunks brought nothing); `fetched` is emptied.
absl::Status MergeFetched(std::vector<torch::Tensor>& fetched,
                          std::vector<torch::Tensor>& decoded,
                          const std::vector<std::string>& names,
                          const std::string& where);

}  // namespace petra::wire

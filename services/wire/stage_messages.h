// Micro-batches <-> the StageService stream messages. A micro-batch whose
// tensors are larger than the chunk size goes out as several messages (each
// carrying at most `chunk_bytes` of payload, at most one chunk per tensor)
// and is put back together, with every tensor check of the codec, before
// anything reaches the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/stage.pb.h"
#include "services/model/micro_batch.h"
#include "services/model/tensor_pair.h"
#include "services/wire/data_channel.h"
#include "services/wire/tensor_chunks.h"
#include "services/wire/tensor_limits.h"

namespace petra::wire {

// The micro-batch (services/model/micro_batch.h) as the stream messages
// carry it.
using model::BackwardBatch;
using model::ForwardBatch;
using model::MicroBatchHeader;

// Most tangents a forward message may carry (one per earlier stage).
inline constexpr int kMaxTangents = 1024;

// Every tensor slot of a payload, defined or not (to move them between the
// host and a device in one go).
std::vector<torch::Tensor*> TensorsOf(ForwardBatch& payload);
std::vector<torch::Tensor*> TensorsOf(BackwardBatch& payload);

// With a `placer`, the tensors' bytes go into its data channel and the one
// message carries a SlotRef per tensor instead (no chunks).
absl::StatusOr<std::vector<petra::v1::ForwardMessage>> EncodeForward(
    const ForwardBatch& payload, uint64_t chunk_bytes,
    wire::PayloadPlacer* placer = nullptr);
absl::StatusOr<std::vector<petra::v1::BackwardMessage>> EncodeBackward(
    const BackwardBatch& payload, uint64_t chunk_bytes,
    wire::PayloadPlacer* placer = nullptr);

// Whether a data channel carries some of the micro-batch's bytes (a
// channel with no room may have left them all in the messages).
bool CarriesSlots(const std::vector<petra::v1::ForwardMessage>& parts);
bool CarriesSlots(const std::vector<petra::v1::BackwardMessage>& parts);

// Joins the messages of one stream. Add returns the micro-batch once its
// last part has arrived, nothing while parts are missing, and
// INVALID_ARGUMENT (naming the micro-batch and field) for a malformed part;
// after an error the partial micro-batch is dropped and the stream goes on.
// Tensors whose bytes a data channel carries are fetched through `fetcher`
// (none: such a message is refused).
class ForwardAssembler {
 public:
  explicit ForwardAssembler(TensorLimits limits = {},
                            wire::PayloadFetcher* fetcher = nullptr);
  // Takes `m` by value: pass it with std::move and its payload becomes the
  // tensors' storage without a copy.
  absl::StatusOr<std::optional<ForwardBatch>> Add(petra::v1::ForwardMessage m);

 private:
  TensorLimits limits_;
  wire::PayloadFetcher* fetcher_;
  std::optional<MicroBatchHeader> header_;
  // Whole tensors a data channel brought, by slot (as slots_).
  std::vector<torch::Tensor> fetched_;
  // first, second, labels, then each tangent's first and second
  std::vector<std::optional<TensorAssembler>> slots_;
};

class BackwardAssembler {
 public:
  explicit BackwardAssembler(TensorLimits limits = {},
                             wire::PayloadFetcher* fetcher = nullptr);
  absl::StatusOr<std::optional<BackwardBatch>> Add(
      petra::v1::BackwardMessage m);  // as ForwardAssembler::Add

 private:
  TensorLimits limits_;
  wire::PayloadFetcher* fetcher_;
  std::optional<MicroBatchHeader> header_;
  // Whole tensors a data channel brought, by slot (as slots_).
  std::vector<torch::Tensor> fetched_;
  // output.first, output.second, grad.first, grad.second
  std::vector<std::optional<TensorAssembler>> slots_;
  std::vector<double> directional_;  // gathered over the parts
};

}  // namespace petra::wire

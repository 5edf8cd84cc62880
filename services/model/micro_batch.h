// A micro-batch between stages: one type from the feed to the loss, in
// both runners. The coordinator's feed fills it, a stage's outbox hands it
// to its link, the gRPC edge (services/wire/stage_messages.h) encodes it to
// stream messages and assembles it back, the stage server's mailbox queues
// it, and the stage's executor takes it (services/engine/stage_io.h). It
// records where its tensors are, as Triton's request records its buffers'
// memory type, so that each step knows what a copy would cost.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "petra/v1/stage.pb.h"  // Phase
#include "services/model/tensor_pair.h"

namespace petra::model {

// Where a micro-batch's tensors are.
enum class TensorHome : uint8_t {
  // Ordinary host memory: decoded from stream messages, or built by the
  // feed.
  kHost,
  // In a data channel's receive buffer (shared memory's, the bulk
  // channel's): the fetcher reuses it once the tensors die.
  kSlot,
  // Page-locked host memory, staged for (or back from) a device.
  kPinnedHost,
  // On the stage's device.
  kDevice,
};

// What every stream message of a micro-batch repeats.
struct MicroBatchHeader {
  std::string job_id;
  uint64_t micro_batch_id = 0;
  uint64_t step = 0;
  petra::v1::Phase phase = petra::v1::PHASE_TRAIN;
  int32_t sender_stage = -1;
  uint32_t epoch = 0;
};

// Going up: the previous stage's output (or, on the first stage, the data
// batch), and the labels where they travel.
struct ForwardBatch {
  MicroBatchHeader header;
  TensorPair x;          // undefined in a labels-only message
  torch::Tensor labels;  // the last stage's; in some modes every stage's
  // Forward gradients: x's tangent along each earlier stage's guess, stage
  // 0's first.
  std::vector<TensorPair> tangents;
  TensorHome home = TensorHome::kHost;

  int64_t id() const { return static_cast<int64_t>(header.micro_batch_id); }
};

// Going down: the receiving stage's output x~_j and delta_{j+1}; with
// forward gradients, instead, the directional derivative of the loss along
// each guess of stages 0..j, j's last.
struct BackwardBatch {
  MicroBatchHeader header;
  TensorPair output;
  TensorPair grad;
  std::vector<double> directional;
  TensorHome home = TensorHome::kHost;

  int64_t id() const { return static_cast<int64_t>(header.micro_batch_id); }
};

// A micro-batch `id` from its parts (the header's other fields: the
// sender's, filled where it is sent).
inline ForwardBatch ForwardOf(int64_t id, TensorPair x,
                              torch::Tensor labels = {},
                              std::vector<TensorPair> tangents = {}) {
  ForwardBatch b;
  b.header.micro_batch_id = static_cast<uint64_t>(id);
  b.x = std::move(x);
  b.labels = std::move(labels);
  b.tangents = std::move(tangents);
  return b;
}

inline BackwardBatch BackwardOf(int64_t id, TensorPair output, TensorPair grad,
                                std::vector<double> directional = {}) {
  BackwardBatch b;
  b.header.micro_batch_id = static_cast<uint64_t>(id);
  b.output = std::move(output);
  b.grad = std::move(grad);
  b.directional = std::move(directional);
  return b;
}

}  // namespace petra::model

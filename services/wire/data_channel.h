// The seam for data channels (docs/DATA_PLANE.md): a stream's messages
// always carry the control (ids, shapes, dtypes, credits, errors); a data
// channel may carry the tensor bytes instead, and the message then holds a
// petra.v1.SlotRef where the bytes would be. The codec
// (services/wire/stage_messages.h) calls these interfaces; the adapters in
// services/link implement them, one per transport: the port sits with the
// wire format, below every adapter. No torch, no gRPC.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/tensor.pb.h"
#include "services/wire/tensor_limits.h"

namespace petra::wire {

// One tensor's bytes, contiguous in this process's memory.
struct PayloadPiece {
  const void* data = nullptr;
  uint64_t bytes = 0;
  // The CUDA device they are on; -1: host memory. Only a placer that
  // takes_device_pieces() is given device pieces.
  int device = -1;
};

// The sending end: takes one micro-batch's pieces at a time.
class PayloadPlacer {
 public:
  virtual ~PayloadPlacer() = default;
  // Copies every piece in and returns, in order, where each is. Waits while
  // the channel is full; an error once it was cancelled or the receiver is
  // gone.
  virtual absl::StatusOr<std::vector<petra::v1::SlotRef>> Place(
      const std::vector<PayloadPiece>& pieces) = 0;
  // Makes a waiting or later Place fail at once (from any thread).
  virtual void Cancel() = 0;
  // The transport's name for metrics and reports ("shm").
  virtual const char* name() const = 0;
  // True when a micro-batch the channel has no room for (Place answers
  // RESOURCE_EXHAUSTED) may travel in the message instead: the job asked
  // for transport auto, not for this channel by name.
  virtual bool may_fall_back() const { return false; }
  // True when pieces may be device memory (cuda_ipc copies them device to
  // device); the others are given host memory.
  virtual bool takes_device_pieces() const { return false; }
};

// The receiving end.
class PayloadFetcher {
 public:
  virtual ~PayloadFetcher() = default;
  // A tensor of an incoming message, with the name errors give it, and
  // where its bytes go.
  struct Field {
    petra::v1::Tensor* tensor = nullptr;
    std::string name;
    // Set by Fetch: the payload, as many bytes as the tensor's header
    // (dtype, shape) says. Its memory is the fetcher's to reuse once the
    // last reference is gone (so a micro-batch of hundreds of MiB does not
    // fault in fresh pages each time).
    std::shared_ptr<const void> bytes;
    // Set by Fetch: the CUDA device `bytes` are on; -1: host memory.
    int device = -1;
  };
  // Copies each field's bytes out of the place its SlotRef names (checked
  // against the header and `limits`), clears the SlotRef, then frees the
  // slots, also when a field is refused. INVALID_ARGUMENT naming the field
  // for a bad reference; NOT_FOUND when the channel is not visible here.
  virtual absl::Status Fetch(std::vector<Field>& fields,
                             const TensorLimits& limits) = 0;
  // Payload bytes fetched so far (the messages' own bytes are not counted).
  virtual uint64_t fetched_bytes() const = 0;
};

}  // namespace petra::wire

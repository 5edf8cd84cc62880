// Splits a tensor whose payload exceeds the chunk size into several
// petra.v1.Tensor messages, and joins them back with every check the decoder
// makes, before the joined payload is allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/tensor.pb.h"
#include "services/wire/tensor_limits.h"

namespace petra::wire {

// Returns `whole` unchanged (one element, no ChunkInfo) when its payload is
// at most `chunk_bytes`; otherwise ceil(size / chunk_bytes) chunks, each with
// dtype, shape and ChunkInfo, in order. `chunk_bytes` must be > 0.
std::vector<petra::v1::Tensor> SplitTensor(const petra::v1::Tensor& whole,
                                           uint64_t chunk_bytes);

// Joins the chunks of one tensor, in order. The first chunk fixes dtype and
// shape; its header and total size are validated (as DecodeTensor would)
// before any payload memory is reserved.
class TensorAssembler {
 public:
  explicit TensorAssembler(std::string field = "tensor",
                           TensorLimits limits = {});

  // Adds the next chunk (or a whole, unchunked tensor). INVALID_ARGUMENT
  // naming the field when it does not continue the tensor being assembled.
  // A whole tensor is kept by moving it, so its payload is not copied.
  absl::Status Add(petra::v1::Tensor&& part);
  absl::Status Add(const petra::v1::Tensor& part) {
    return Add(petra::v1::Tensor(part));
  }

  // True once every byte of the payload has arrived.
  bool complete() const { return complete_; }

  // The joined tensor, without ChunkInfo; FAILED_PRECONDITION before
  // complete(). Resets the assembler for the next tensor.
  absl::StatusOr<petra::v1::Tensor> Take();

 private:
  std::string field_;
  TensorLimits limits_;
  std::optional<petra::v1::Tensor> pending_;
  uint64_t total_ = 0;
  bool complete_ = false;
};

}  // namespace petra::wire

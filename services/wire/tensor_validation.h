// Checks a petra.v1.Tensor's header and payload size without torch, so the
// RPC layer (and the fuzzer) can refuse a bad tensor before any allocation.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/tensor.pb.h"
#include "services/wire/tensor_limits.h"

namespace petra::wire {

// Bytes per element of `dtype`; INVALID_ARGUMENT naming `field` for
// DTYPE_UNSPECIFIED and values this build does not know.
absl::StatusOr<uint64_t> DTypeItemSize(int dtype, const std::string& field);

// Lower-case name of a dtype ("float32"), or "dtype(N)" for unknown values.
std::string DTypeName(int dtype);

// Payload size the header (dtype and shape) describes, after checking the
// dtype is known, rank <= limits.max_rank, no dimension is negative, the
// element count does not overflow and the size is within limits.max_bytes.
// `field` names the tensor in errors, e.g. "activation.first".
absl::StatusOr<uint64_t> ExpectedPayloadBytes(const petra::v1::Tensor& tensor,
                                              const TensorLimits& limits,
                                              const std::string& field);

// ExpectedPayloadBytes plus: the tensor is not a chunk and `data` holds
// exactly the expected number of bytes.
absl::Status ValidateTensor(const petra::v1::Tensor& tensor,
                            const TensorLimits& limits,
                            const std::string& field);

}  // namespace petra::wire

// torch::Tensor <-> petra.v1.Tensor. Every activation, gradient and label
// batch crosses the wire through these two functions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/tensor.pb.h"
#include "services/wire/tensor_limits.h"

namespace at {
class Tensor;
}  // namespace at

namespace petra::wire {

// Writes `tensor` into `out` (replacing its contents). The tensor is moved to
// the CPU and made contiguous first, so a view sends only its own elements.
// UNIMPLEMENTED for dtypes the wire does not carry (bool, complex, int8...).
absl::Status EncodeTensor(const at::Tensor& tensor, petra::v1::Tensor* out);

// EncodeTensor and SplitTensor in one pass: each byte is copied once, from
// the tensor straight into its chunk (a 6 MiB activation crosses this on
// every tick, so the intermediate whole message is worth skipping). One
// element without ChunkInfo when the payload fits in `chunk_bytes`, or
// when `chunk_bytes` is 0.
absl::StatusOr<std::vector<petra::v1::Tensor>> EncodeTensorChunks(
    const at::Tensor& tensor, uint64_t chunk_bytes);

// The tensor as its bytes leave (on the CPU, or on its device with
// `keep_device`; contiguous), with `header` set to its dtype and shape and
// no payload: for a data channel that carries the bytes beside the message
// (data_channel.h).
absl::StatusOr<at::Tensor> DenseWithHeader(const at::Tensor& tensor,
                                           petra::v1::Tensor* header,
                                           bool keep_device = false);

// A tensor over `bytes` (a data channel's payload, data_channel.h), on the
// CPU or on CUDA device `device` (>= 0), shaped and typed by `header` after
// ExpectedPayloadBytes; the tensor holds a reference to `bytes` until it
// is freed.
absl::StatusOr<at::Tensor> TensorOverBytes(const petra::v1::Tensor& header,
                                           std::shared_ptr<const void> bytes,
                                           const TensorLimits& limits,
                                           const std::string& field,
                                           int device = -1);

// Builds a CPU tensor from `in` after ValidateTensor: nothing is allocated
// for a tensor whose header or size is wrong. `field` names it in errors.
absl::StatusOr<at::Tensor> DecodeTensor(const petra::v1::Tensor& in,
                                        const TensorLimits& limits = {},
                                        const std::string& field = "tensor");

// The same, but the tensor takes over `in`'s payload instead of copying it
// (`in.data` is left empty): the receiving stage's copy of every message.
absl::StatusOr<at::Tensor> DecodeTensor(petra::v1::Tensor&& in,
                                        const TensorLimits& limits = {},
                                        const std::string& field = "tensor");

}  // namespace petra::wire

// torch::Tensor <-> petra.v1.Tensor. Every activation, gradient and label
// batch crosses the wire through these two functions.
#pragma once

#include <string>

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

// Builds a CPU tensor from `in` after ValidateTensor: nothing is allocated
// for a tensor whose header or size is wrong. `field` names it in errors.
absl::StatusOr<at::Tensor> DecodeTensor(const petra::v1::Tensor& in,
                                        const TensorLimits& limits = {},
                                        const std::string& field = "tensor");

}  // namespace petra::wire

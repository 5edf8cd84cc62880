#include "services/wire/tensor_codec.h"

#include <torch/torch.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "services/wire/tensor_validation.h"

namespace petra::wire {
namespace {

// The wire is little-endian; so is every machine we build for.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the tensor codec assumes a little-endian host");

absl::StatusOr<petra::v1::DType> ToWire(c10::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return petra::v1::DTYPE_FLOAT32;
    case torch::kFloat16:
      return petra::v1::DTYPE_FLOAT16;
    case torch::kBFloat16:
      return petra::v1::DTYPE_BFLOAT16;
    case torch::kFloat64:
      return petra::v1::DTYPE_FLOAT64;
    case torch::kInt64:
      return petra::v1::DTYPE_INT64;
    case torch::kInt32:
      return petra::v1::DTYPE_INT32;
    case torch::kUInt8:
      return petra::v1::DTYPE_UINT8;
    default:
      return absl::UnimplementedError(absl::StrCat(
          "tensor dtype ", c10::toString(t), " has no wire encoding"));
  }
}

c10::ScalarType FromWire(int dtype) {
  switch (dtype) {
    case petra::v1::DTYPE_FLOAT16:
      return torch::kFloat16;
    case petra::v1::DTYPE_BFLOAT16:
      return torch::kBFloat16;
    case petra::v1::DTYPE_FLOAT64:
      return torch::kFloat64;
    case petra::v1::DTYPE_INT64:
      return torch::kInt64;
    case petra::v1::DTYPE_INT32:
      return torch::kInt32;
    case petra::v1::DTYPE_UINT8:
      return torch::kUInt8;
    default:
      return torch::kFloat32;  // validated before we get here
  }
}

}  // namespace

absl::Status EncodeTensor(const at::Tensor& tensor, petra::v1::Tensor* out) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError("cannot encode an undefined tensor");
  }
  absl::StatusOr<petra::v1::DType> dtype = ToWire(tensor.scalar_type());
  if (!dtype.ok()) return dtype.status();
  // contiguous() is a no-op for a contiguous tensor or view; data_ptr() of a
  // contiguous view points at its first element, so only its bytes go out.
  at::Tensor dense;
  try {
    dense = tensor.device().is_cpu() ? tensor.contiguous()
                                     : tensor.to(torch::kCPU).contiguous();
  } catch (const std::exception& e) {
    // Torch reports device errors by exception; they stop here.
    return absl::InternalError(
        absl::StrCat("cannot copy tensor to the CPU: ", e.what()));
  }
  out->Clear();
  out->set_dtype(*dtype);
  for (int64_t d : dense.sizes()) out->add_shape(d);
  const size_t bytes = dense.numel() * dense.element_size();
  out->mutable_data()->assign(static_cast<const char*>(dense.data_ptr()),
                              bytes);
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> DecodeTensor(const petra::v1::Tensor& in,
                                        const TensorLimits& limits,
                                        const std::string& field) {
  if (absl::Status s = ValidateTensor(in, limits, field); !s.ok()) return s;
  std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
  at::Tensor t;
  try {
    t = torch::empty(shape, torch::TensorOptions().dtype(FromWire(in.dtype())));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        field, ": cannot allocate ", in.data().size(), " bytes: ", e.what()));
  }
  if (!in.data().empty()) {
    std::memcpy(t.data_ptr(), in.data().data(), in.data().size());
  }
  return t;
}

}  // namespace petra::wire

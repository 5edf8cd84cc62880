#include "services/wire/tensor_validation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace petra::wire {
namespace {

std::string ShapeText(const petra::v1::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.shape(), ", "), "]");
}

}  // namespace

absl::StatusOr<uint64_t> DTypeItemSize(int dtype, const std::string& field) {
  switch (dtype) {
    case petra::v1::DTYPE_FLOAT32:
    case petra::v1::DTYPE_INT32:
      return 4;
    case petra::v1::DTYPE_FLOAT16:
    case petra::v1::DTYPE_BFLOAT16:
      return 2;
    case petra::v1::DTYPE_FLOAT64:
    case petra::v1::DTYPE_INT64:
      return 8;
    case petra::v1::DTYPE_UINT8:
      return 1;
    case petra::v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: not set (DTYPE_UNSPECIFIED)"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: unknown value ", dtype));
  }
}

std::string DTypeName(int dtype) {
  switch (dtype) {
    case petra::v1::DTYPE_FLOAT32:
      return "float32";
    case petra::v1::DTYPE_FLOAT16:
      return "float16";
    case petra::v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case petra::v1::DTYPE_FLOAT64:
      return "float64";
    case petra::v1::DTYPE_INT64:
      return "int64";
    case petra::v1::DTYPE_INT32:
      return "int32";
    case petra::v1::DTYPE_UINT8:
      return "uint8";
    default:
      return absl::StrCat("dtype(", dtype, ")");
  }
}

absl::StatusOr<uint64_t> ExpectedPayloadBytes(const petra::v1::Tensor& tensor,
                                              const TensorLimits& limits,
                                              const std::string& field) {
  absl::StatusOr<uint64_t> item = DTypeItemSize(tensor.dtype(), field);
  if (!item.ok()) return item.status();
  if (tensor.shape_size() > limits.max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: rank ", tensor.shape_size(),
                     " exceeds the maximum of ", limits.max_rank));
  }
  bool has_zero_dim = false;
  for (int i = 0; i < tensor.shape_size(); ++i) {
    int64_t dim = tensor.shape(i);
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape[", i, "]: dimension ", dim, " is negative"));
    }
    has_zero_dim |= dim == 0;
  }
  // Multiply with overflow checks: a hostile shape must not wrap around to
  // a small size that passes the byte-count check. A zero dimension makes an
  // empty tensor, but its other dimensions are held to the same bound (as
  // if it were 1): torch multiplies them into strides, and [2^62, 2^62, 0]
  // is no tensor anyone sends.
  uint64_t bytes = *item;
  for (int64_t dim : tensor.shape()) {
    const uint64_t factor = dim == 0 ? 1 : static_cast<uint64_t>(dim);
    if (__builtin_mul_overflow(bytes, factor, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape: ", ShapeText(tensor), " of ",
                       DTypeName(tensor.dtype()), " overflows 64 bits"));
    }
  }
  if (bytes > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: ", ShapeText(tensor), " of ", DTypeName(tensor.dtype()),
        has_zero_dim ? " would need, without its zero dimension, " : " needs ",
        bytes, " bytes, over the limit of ", limits.max_bytes, " bytes"));
  }
  return has_zero_dim ? 0 : bytes;
}

absl::Status ValidateTensor(const petra::v1::Tensor& tensor,
                            const TensorLimits& limits,
                            const std::string& field) {
  if (tensor.has_chunk()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".chunk: a chunk must be assembled before it is decoded"));
  }
  absl::StatusOr<uint64_t> expected =
      ExpectedPayloadBytes(tensor, limits, field);
  if (!expected.ok()) return expected.status();
  if (tensor.data().size() != *expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".data: ", tensor.data().size(),
                     " bytes, but shape ", ShapeText(tensor), " of ",
                     DTypeName(tensor.dtype()), " needs ", *expected));
  }
  return absl::OkStatus();
}

}  // namespace petra::wire

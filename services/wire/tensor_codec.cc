#include "services/wire/tensor_codec.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <utility>

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

// The tensor as its bytes go out: on the CPU (or where it is, with
// `keep_device`) and contiguous (a no-op for a contiguous CPU tensor or
// view; data_ptr() of a contiguous view points at its first element, so
// only its own bytes go out).
absl::StatusOr<at::Tensor> Dense(const at::Tensor& tensor,
                                 bool keep_device = false) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError("cannot encode an undefined tensor");
  }
  try {
    return tensor.device().is_cpu() || keep_device
               ? tensor.contiguous()
               : tensor.to(torch::kCPU).contiguous();
  } catch (const std::exception& e) {
    // Torch reports device errors by exception; they stop here.
    return absl::InternalError(
        absl::StrCat("cannot copy tensor to the CPU: ", e.what()));
  }
}

void SetHeader(const at::Tensor& dense, petra::v1::DType dtype,
               petra::v1::Tensor* out) {
  out->Clear();
  out->set_dtype(dtype);
  for (int64_t d : dense.sizes()) out->add_shape(d);
}

}  // namespace

absl::StatusOr<at::Tensor> DenseWithHeader(const at::Tensor& tensor,
                                           petra::v1::Tensor* header,
                                           bool keep_device) {
  absl::StatusOr<at::Tensor> dense = Dense(tensor, keep_device);
  if (!dense.ok()) return dense.status();
  absl::StatusOr<petra::v1::DType> dtype = ToWire(dense->scalar_type());
  if (!dtype.ok()) return dtype.status();
  SetHeader(*dense, *dtype, header);
  return dense;
}

absl::Status EncodeTensor(const at::Tensor& tensor, petra::v1::Tensor* out) {
  // Chunk size 0: one whole tensor.
  absl::StatusOr<std::vector<petra::v1::Tensor>> whole =
      EncodeTensorChunks(tensor, 0);
  if (!whole.ok()) return whole.status();
  *out = std::move(whole->front());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<petra::v1::Tensor>> EncodeTensorChunks(
    const at::Tensor& tensor, uint64_t chunk_bytes) {
  absl::StatusOr<at::Tensor> dense = Dense(tensor);
  if (!dense.ok()) return dense.status();
  absl::StatusOr<petra::v1::DType> dtype = ToWire(dense->scalar_type());
  if (!dtype.ok()) return dtype.status();
  const char* bytes = static_cast<const char*>(dense->data_ptr());
  const uint64_t total = dense->numel() * dense->element_size();
  std::vector<petra::v1::Tensor> parts;
  if (chunk_bytes == 0 || total <= chunk_bytes) {
    SetHeader(*dense, *dtype, &parts.emplace_back());
    parts.back().mutable_data()->assign(bytes, total);
    return parts;
  }
  parts.reserve((total + chunk_bytes - 1) / chunk_bytes);
  for (uint64_t offset = 0; offset < total; offset += chunk_bytes) {
    petra::v1::Tensor& part = parts.emplace_back();
    SetHeader(*dense, *dtype, &part);
    part.mutable_chunk()->set_offset(offset);
    part.mutable_chunk()->set_total_bytes(total);
    part.mutable_data()->assign(bytes + offset,
                                std::min(chunk_bytes, total - offset));
  }
  return parts;
}

absl::StatusOr<at::Tensor> TensorOverBytes(const petra::v1::Tensor& header,
                                           std::shared_ptr<const void> bytes,
                                           const TensorLimits& limits,
                                           const std::string& field,
                                           int device) {
  absl::StatusOr<uint64_t> size = ExpectedPayloadBytes(header, limits, field);
  if (!size.ok()) return size.status();
  std::vector<int64_t> shape(header.shape().begin(), header.shape().end());
  auto options = torch::TensorOptions().dtype(FromWire(header.dtype()));
  if (device >= 0) {
    options = options.device(
        torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device)));
  }
  if (*size == 0 || bytes == nullptr) return torch::empty(shape, options);
  try {
    return torch::from_blob(
        const_cast<void*>(bytes.get()), shape,
        [bytes](void*) mutable { bytes.reset(); }, options);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat(field, ": cannot wrap the payload: ", e.what()));
  }
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

absl::StatusOr<at::Tensor> DecodeTensor(petra::v1::Tensor&& in,
                                        const TensorLimits& limits,
                                        const std::string& field) {
  if (absl::Status s = ValidateTensor(in, limits, field); !s.ok()) return s;
  if (in.data().empty()) return DecodeTensor(in, limits, field);
  std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
  // The tensor's storage is the received string itself; the deleter frees
  // it with the last reference. Alignment: malloc's 16 bytes suffice for
  // every wire dtype.
  auto* payload = new std::string(std::move(*in.mutable_data()));
  in.clear_data();
  try {
    return torch::from_blob(
        payload->data(), shape, [payload](void*) { delete payload; },
        torch::TensorOptions().dtype(FromWire(in.dtype())));
  } catch (const std::exception& e) {
    // Not deleted here: a storage built before the throw owns it by now.
    return absl::InternalError(
        absl::StrCat(field, ": cannot wrap the payload: ", e.what()));
  }
}

}  // namespace petra::wire

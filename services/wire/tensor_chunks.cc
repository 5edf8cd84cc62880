#include "services/wire/tensor_chunks.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/wire/tensor_validation.h"

namespace petra::wire {
namespace {

// Up to this much of a chunked payload is reserved up front (four default
// chunks); beyond it the buffer grows as bytes arrive.
constexpr uint64_t kMaxAssemblerReserveBytes = uint64_t{64} << 20;

}  // namespace

std::vector<petra::v1::Tensor> SplitTensor(const petra::v1::Tensor& whole,
                                           uint64_t chunk_bytes) {
  const std::string& data = whole.data();
  if (chunk_bytes == 0 || data.size() <= chunk_bytes) return {whole};
  std::vector<petra::v1::Tensor> parts;
  parts.reserve((data.size() + chunk_bytes - 1) / chunk_bytes);
  for (uint64_t offset = 0; offset < data.size(); offset += chunk_bytes) {
    petra::v1::Tensor& part = parts.emplace_back();
    part.set_dtype(whole.dtype());
    *part.mutable_shape() = whole.shape();
    part.mutable_chunk()->set_offset(offset);
    part.mutable_chunk()->set_total_bytes(data.size());
    part.set_data(data.substr(
        offset, std::min<uint64_t>(chunk_bytes, data.size() - offset)));
  }
  return parts;
}

TensorAssembler::TensorAssembler(std::string field, TensorLimits limits)
    : field_(std::move(field)), limits_(limits) {}

absl::Status TensorAssembler::Add(petra::v1::Tensor&& part) {
  if (complete_) {
    return absl::InvalidArgumentError(absl::StrCat(
        field_, ": another chunk arrived after the tensor was complete"));
  }
  if (!pending_.has_value()) {
    if (!part.has_chunk()) {
      // A whole tensor: validate like the decoder and keep it.
      if (absl::Status s = ValidateTensor(part, limits_, field_); !s.ok()) {
        return s;
      }
      total_ = part.data().size();
      pending_ = std::move(part);
      complete_ = true;
      return absl::OkStatus();
    }
    absl::StatusOr<uint64_t> expected =
        ExpectedPayloadBytes(part, limits_, field_);
    if (!expected.ok()) return expected.status();
    if (part.chunk().total_bytes() != *expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          field_, ".chunk.total_bytes: ", part.chunk().total_bytes(),
          ", but the shape needs ", *expected));
    }
    if (part.chunk().offset() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_, ".chunk.offset: first chunk starts at ",
                       part.chunk().offset(), ", not 0"));
    }
    total_ = *expected;
    pending_.emplace();
    pending_->set_dtype(part.dtype());
    *pending_->mutable_shape() = part.shape();
    // Reserve what the first chunks will fill, not what the header claims:
    // a peer may declare a payload at the limit and send one byte.
    pending_->mutable_data()->reserve(
        std::min<uint64_t>(total_, kMaxAssemblerReserveBytes));
  } else {
    const petra::v1::Tensor& head = *pending_;
    if (!part.has_chunk()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_, ".chunk: missing in a continuation chunk"));
    }
    if (part.dtype() != head.dtype() ||
        !std::equal(part.shape().begin(), part.shape().end(),
                    head.shape().begin(), head.shape().end())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_, ": dtype or shape changed between chunks"));
    }
    if (part.chunk().total_bytes() != total_) {
      return absl::InvalidArgumentError(absl::StrCat(
          field_, ".chunk.total_bytes: ", part.chunk().total_bytes(),
          " differs from the first chunk's ", total_));
    }
    if (part.chunk().offset() != head.data().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field_, ".chunk.offset: ", part.chunk().offset(), ", expected ",
          head.data().size(), " (chunks must arrive in order, without gaps)"));
    }
  }
  std::string* data = pending_->mutable_data();
  if (part.data().size() > total_ - data->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field_, ".data: chunk of ", part.data().size(), " bytes at offset ",
        data->size(), " overruns the payload of ", total_, " bytes"));
  }
  if (part.data().empty() && total_ > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_, ".data: empty chunk"));
  }
  data->append(part.data());
  complete_ = data->size() == total_;
  return absl::OkStatus();
}

absl::StatusOr<petra::v1::Tensor> TensorAssembler::Take() {
  if (!complete_) {
    return absl::FailedPreconditionError(
        absl::StrCat(field_, ": incomplete, ",
                     pending_.has_value() ? pending_->data().size() : 0, " of ",
                     total_, " bytes received"));
  }
  petra::v1::Tensor out = std::move(*pending_);
  pending_.reset();
  total_ = 0;
  complete_ = false;
  return out;
}

}  // namespace petra::wire

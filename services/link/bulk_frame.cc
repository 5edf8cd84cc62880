#include "services/link/bulk_frame.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "petra/v1/bulk.pb.h"

namespace petra::link {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kDataField = petra::v1::BulkFrame::kDataFieldNumber;
// Five varint fields and their tags, the data tag and its length: at most
// 5 * 11 + 1 + 10 bytes.
constexpr size_t kMaxPrefix = 80;

}  // namespace

grpc::ByteBuffer EncodeBulkFrame(const BulkFrameHeader& header,
                                 const void* data, uint64_t bytes,
                                 void (*release)(void*), void* user) {
  petra::v1::BulkFrame h;
  h.set_link(header.link);
  h.set_sequence(header.sequence);
  h.set_offset(header.offset);
  h.set_total_bytes(header.total_bytes);
  h.set_payload_bytes(header.payload_bytes);
  std::string prefix = h.SerializeAsString();
  uint8_t tag[2 * 10];
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
      WireFormatLite::MakeTag(kDataField,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
      tag);
  end =
      google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(bytes, end);
  prefix.append(reinterpret_cast<const char*>(tag), end - tag);
  grpc::Slice slices[2] = {
      grpc::Slice(prefix),
      grpc::Slice(const_cast<void*>(data), bytes, release, user)};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<DecodedBulkFrame> DecodeBulkFrame(
    const grpc::ByteBuffer& buffer, const BulkDestination& destination) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("bulk frame: unreadable buffer");
  }
  const size_t length = buffer.Length();
  uint8_t prefix[kMaxPrefix];
  size_t have = 0;
  for (const grpc::Slice& s : slices) {
    const size_t n = std::min(s.size(), kMaxPrefix - have);
    std::memcpy(prefix + have, s.begin(), n);
    have += n;
    if (have == kMaxPrefix) break;
  }
  google::protobuf::io::CodedInputStream in(prefix, static_cast<int>(have));
  DecodedBulkFrame out;
  uint64_t data_bytes = 0;
  bool data_found = false;
  while (!data_found) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field == kDataField && WireFormatLite::GetTagWireType(tag) ==
                                   WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      data_found = in.ReadVarint64(&data_bytes);
      if (!data_found) break;
      continue;
    }
    uint64_t v = 0;
    if (WireFormatLite::GetTagWireType(tag) !=
            WireFormatLite::WIRETYPE_VARINT ||
        !in.ReadVarint64(&v)) {
      break;
    }
    switch (field) {
      case petra::v1::BulkFrame::kLinkFieldNumber:
        out.header.link = v;
        break;
      case petra::v1::BulkFrame::kSequenceFieldNumber:
        out.header.sequence = v;
        break;
      case petra::v1::BulkFrame::kOffsetFieldNumber:
        out.header.offset = v;
        break;
      case petra::v1::BulkFrame::kTotalBytesFieldNumber:
        out.header.total_bytes = v;
        break;
      case petra::v1::BulkFrame::kPayloadBytesFieldNumber:
        out.header.payload_bytes = v;
        break;
      default:
        break;  // a later version's field: skipped
    }
  }
  const size_t start = static_cast<size_t>(in.CurrentPosition());
  if (!data_found || start > length || length - start != data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("bulk frame of ", length,
                     " bytes is not a BulkFrame header followed by its data"));
  }
  absl::StatusOr<std::shared_ptr<uint8_t>> to =
      destination(out.header, data_bytes);
  if (!to.ok()) return to.status();
  uint8_t* at = to->get();
  size_t skip = start;
  for (const grpc::Slice& s : slices) {
    const uint8_t* p = s.begin();
    size_t n = s.size();
    const size_t skipped = std::min(skip, n);
    p += skipped;
    n -= skipped;
    skip -= skipped;
    if (n == 0) continue;
    std::memcpy(at, p, n);
    at += n;
  }
  out.bytes = data_bytes;
  return out;
}

}  // namespace petra::link

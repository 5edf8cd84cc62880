// The bulk channel's frames as raw gRPC byte buffers (bulk.proto): a
// serialized BulkFrame header, then `data` as a slice over the sender's own
// memory. Reading copies `data` once, straight to where it belongs.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace petra::link {

struct BulkFrameHeader {
  uint64_t link = 0;
  uint64_t sequence = 0;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
  uint64_t payload_bytes = 0;
};

// A frame whose data is `bytes` at `data`, not copied: gRPC calls
// `release(user)` once it no longer refers to them (the caller keeps them
// alive until then).
grpc::ByteBuffer EncodeBulkFrame(const BulkFrameHeader& header,
                                 const void* data, uint64_t bytes,
                                 void (*release)(void*), void* user);

// Where a frame's data goes, asked with its header and data size.
using BulkDestination = std::function<absl::StatusOr<std::shared_ptr<uint8_t>>(
    const BulkFrameHeader& header, uint64_t bytes)>;

struct DecodedBulkFrame {
  BulkFrameHeader header;
  uint64_t bytes = 0;  // data copied
};

// Reads the header, asks `destination` and copies the data there.
// INVALID_ARGUMENT for a buffer that is not a BulkFrame with data last.
absl::StatusOr<DecodedBulkFrame> DecodeBulkFrame(
    const grpc::ByteBuffer& buffer, const BulkDestination& destination);

}  // namespace petra::link

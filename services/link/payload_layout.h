// How a micro-batch's tensors lie in one buffer (a shared-memory slot, a
// bulk receive buffer): each at an offset that is a multiple of
// kPayloadAlign, so every tensor the receiver makes over the buffer is
// aligned. Both data channels lay payloads out here.
#pragma once

#include <cstdint>
#include <vector>

#include "services/wire/data_channel.h"

namespace petra::link {

inline constexpr uint64_t kPayloadAlign = 64;

inline uint64_t AlignedBytes(uint64_t n) {
  return (n + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
}

struct PayloadLayout {
  std::vector<uint64_t> offsets;  // one per piece
  uint64_t total = 0;             // the buffer's size, padding included
  uint64_t payload = 0;           // the pieces' own bytes
};

inline PayloadLayout LayOut(const std::vector<wire::PayloadPiece>& pieces) {
  PayloadLayout l;
  for (const wire::PayloadPiece& p : pieces) {
    l.offsets.push_back(l.total);
    l.total += AlignedBytes(p.bytes);
    l.payload += p.bytes;
  }
  return l;
}

}  // namespace petra::link

// The input format of petra_fuzz_tensor_codec, shared with the seed writer
// (make_seeds.cc). Byte 0 picks the mode (modulo 4); the rest is one
// serialized message (kTensor) or a sequence of them, each prefixed by its
// size in 2 bytes, little-endian (the other modes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace petra::fuzz {

enum Mode : uint8_t {
  kTensor = 0,          // one petra.v1.Tensor: validate, decode, re-encode
  kChunks = 1,          // petra.v1.Tensor chunks into one TensorAssembler
  kForwardStream = 2,   // petra.v1.ForwardMessage parts, one stream
  kBackwardStream = 3,  // petra.v1.BackwardMessage parts, one stream
};

inline std::string Framed(Mode mode, const std::vector<std::string>& parts) {
  std::string out(1, static_cast<char>(mode));
  for (const std::string& p : parts) {
    const size_t n = std::min<size_t>(p.size(), 0xffff);
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>(n >> 8);
    out.append(p, 0, n);
  }
  return out;
}

// The parts of a framed input (after the mode byte); a short last record
// keeps what is there.
inline std::vector<std::string> Unframed(const uint8_t* data, size_t size) {
  std::vector<std::string> parts;
  while (size >= 2) {
    size_t n = data[0] | (static_cast<size_t>(data[1]) << 8);
    data += 2;
    size -= 2;
    n = std::min(n, size);
    parts.emplace_back(reinterpret_cast<const char*>(data), n);
    data += n;
    size -= n;
  }
  return parts;
}

}  // namespace petra::fuzz

// A structure-aware mutator of protobuf messages written on protobuf's
// reflection (Debian 12 has no libprotobuf-mutator): starting from a valid
// request, it changes fields to the values that break code (boundaries,
// NaN, paths that climb, huge and empty strings, unknown enum numbers),
// adds, drops and repeats elements of repeated fields, and clears or
// descends into sub-messages. Each choice is read from a FuzzBytes, so
// libFuzzer's input steers it and a fixed input replays it.
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace petra::fuzz {

// Choices read off a byte string; past its end, every choice is 0 (the
// mutation then stops changing anything).
class FuzzBytes {
 public:
  FuzzBytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  // A number in [0, bound) (0 when bound is 0).
  uint64_t Below(uint64_t bound);
  uint64_t Word();
  // Up to `max` raw bytes.
  std::string Bytes(size_t max);

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// Applies up to `steps` mutations to `m`, each chosen from `in`.
void Mutate(google::protobuf::Message* m, FuzzBytes& in, int steps);

}  // namespace petra::fuzz

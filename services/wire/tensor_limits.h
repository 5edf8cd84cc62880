// Limits the tensor decoder enforces before it allocates anything.
#pragma once

#include <cstdint>

namespace petra::wire {

// Largest rank a decoded tensor may have.
inline constexpr int kMaxTensorRank = 8;

// Default cap on one tensor's payload: 1 GiB. A ResNet50 stage activation at
// micro-batch 64 on 224x224 inputs is ~50 MB, so this leaves a wide margin
// while refusing absurd shapes before they are allocated.
inline constexpr uint64_t kDefaultMaxTensorBytes = uint64_t{1} << 30;

struct TensorLimits {
  uint64_t max_bytes = kDefaultMaxTensorBytes;
  int max_rank = kMaxTensorRank;
};

}  // namespace petra::wire

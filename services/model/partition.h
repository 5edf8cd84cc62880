// Cutting a chain of blocks into stages of consecutive blocks.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace petra::model {

// A stage's blocks [begin, end).
struct BlockRange {
  int begin = 0;
  int end = 0;
  bool operator==(const BlockRange& o) const {
    return begin == o.begin && end == o.end;
  }
};

// One stage per block.
std::vector<BlockRange> PerBlockPartition(int blocks);

// `stages` groups of consecutive blocks minimising the largest group cost
// (ties: the earliest cut), every group non-empty. INVALID_ARGUMENT when
// stages < 1, stages > costs.size() or a cost is negative.
absl::StatusOr<std::vector<BlockRange>> BalancedPartition(
    const std::vector<double>& costs, int stages);

}  // namespace petra::model

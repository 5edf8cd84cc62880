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

// Whether `ranges` are non-empty, consecutive and cover [0, blocks) exactly.
inline bool CoversInOrder(const std::vector<BlockRange>& ranges, int blocks) {
  if (ranges.empty() || ranges.front().begin != 0 ||
      ranges.back().end != blocks) {
    return false;
  }
  for (size_t j = 0; j < ranges.size(); ++j) {
    if (ranges[j].begin >= ranges[j].end ||
        (j > 0 && ranges[j].begin != ranges[j - 1].end)) {
      return false;
    }
  }
  return true;
}

// One stage per block.
std::vector<BlockRange> PerBlockPartition(int blocks);

// `stages` groups of consecutive blocks minimising the largest group cost
// (ties: the earliest cut), every group non-empty. INVALID_ARGUMENT when
// stages < 1, stages > costs.size() or a cost is negative.
absl::StatusOr<std::vector<BlockRange>> BalancedPartition(
    const std::vector<double>& costs, int stages);

}  // namespace petra::model

// Cutting a chain of blocks into stages of consecutive blocks.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace petra::model {

// A stage's blocks [begin, end).
struct BlockRange {
  int begin = 0;
  int end = 0;
  bool operator==(const BlockRange& o) const {
    return begin == o.begin && end == o.end;
  }
};

// OK when `ranges` are non-empty, consecutive and cover [0, blocks) exactly;
// INVALID_ARGUMENT naming the first range that does not. What every range a
// request brings is checked with before a block is looked up by it. Inline:
// the simulator uses it without the model library.
inline absl::Status CheckCovers(const std::vector<BlockRange>& ranges,
                                int blocks) {
  if (ranges.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no stage ranges for the network's ", blocks, " blocks"));
  }
  for (size_t j = 0; j < ranges.size(); ++j) {
    const BlockRange& r = ranges[j];
    const int begin = j == 0 ? 0 : ranges[j - 1].end;
    if (r.begin != begin || r.end <= r.begin || r.end > blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", j, "'s block range [", r.begin, ", ", r.end,
          ") must start at ", begin, ", hold at least one block and end by ",
          blocks, " (the network's blocks)"));
    }
  }
  if (ranges.back().end != blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stage ranges end at block ", ranges.back().end,
                     " but the network has ", blocks));
  }
  return absl::OkStatus();
}

// Whether CheckCovers(ranges, blocks) is OK.
inline bool CoversInOrder(const std::vector<BlockRange>& ranges, int blocks) {
  return CheckCovers(ranges, blocks).ok();
}

// One stage per block.
std::vector<BlockRange> PerBlockPartition(int blocks);

// `stages` groups of consecutive blocks minimising the largest group cost
// (ties: the earliest cut), every group non-empty. INVALID_ARGUMENT when
// stages < 1, stages > costs.size() or a cost is negative.
absl::StatusOr<std::vector<BlockRange>> BalancedPartition(
    const std::vector<double>& costs, int stages);

}  // namespace petra::model

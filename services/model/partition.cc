#include "services/model/partition.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace petra::model {

std::vector<BlockRange> PerBlockPartition(int blocks) {
  std::vector<BlockRange> ranges;
  for (int i = 0; i < blocks; ++i) ranges.push_back({i, i + 1});
  return ranges;
}

absl::StatusOr<std::vector<BlockRange>> BalancedPartition(
    const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  if (stages < 1 || stages > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot cut ", n, " blocks into ", stages, " non-empty stages"));
  }
  for (double c : costs) {
    if (!(c >= 0)) {
      return absl::InvalidArgumentError("block costs must be >= 0");
    }
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // best[s][i]: smallest possible max-cost cutting the first i blocks into s
  // stages; cut[s][i]: where the last of those stages begins. n <= a few
  // hundred blocks, so O(stages * n^2) is instant.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1,
                                        std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {
        double cost = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (cost < best[s][i]) {
          best[s][i] = cost;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<BlockRange> ranges(stages);
  for (int s = stages, i = n; s >= 1; --s) {
    ranges[s - 1] = {cut[s][i], i};
    i = cut[s][i];
  }
  return ranges;
}

}  // namespace petra::model

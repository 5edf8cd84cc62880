// What one pass (training or evaluation) did, as the runner tallies the last
// stage's reports: one rule for every runner. A micro-batch whose loss is
// NaN or Inf (skipped under training.non_finite) is in the loss log but not
// in the mean loss, the accuracy or the throughput; all means are per sample.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace petra::engine {

// The totals, and the rates they give.
struct PassTotals {
  int64_t micro_batches = 0;  // losses reported
  int64_t fed_samples = 0;    // samples of every micro-batch, skipped or not
  int64_t samples = 0;        // samples of the micro-batches with a finite loss
  int64_t correct = 0;
  double loss_sum = 0;  // loss x samples, finite losses only
  int64_t skipped = 0;  // micro-batches with a non-finite loss
  double seconds = 0;   // the pass's duration

  double mean_loss() const { return samples > 0 ? loss_sum / samples : 0; }
  double accuracy() const {
    return samples > 0 ? static_cast<double>(correct) / samples : 0;
  }
  double samples_per_second() const {
    return seconds > 0 ? samples / seconds : 0;
  }
};

struct PassResult : PassTotals {
  // Every micro-batch's (id, loss), in the order reported (training only).
  std::vector<std::pair<int64_t, double>> losses;

  // The last stage finished micro-batch `id` with this mean loss.
  void Record(int64_t id, double loss, int64_t correct_count,
              int64_t sample_count, bool keep_loss) {
    ++micro_batches;
    fed_samples += sample_count;
    if (keep_loss) losses.emplace_back(id, loss);
    if (!std::isfinite(loss)) {
      ++skipped;
      return;
    }
    loss_sum += loss * sample_count;
    correct += correct_count;
    samples += sample_count;
  }
  // The totals alone (progress reports during a pass).
  PassTotals totals() const { return *this; }
};

}  // namespace petra::engine

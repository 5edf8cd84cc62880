// What one pass (training or evaluation) did, as the runner tallies the last
// stage's reports: one rule for every runner. A micro-batch whose loss is
// NaN or Inf (skipped under training.non_finite) is in the loss log but not
// in the mean loss, the accuracy or the throughput; all means are per sample.
#pragma once

#include <algorithm>
#include <chrono>
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

// One training micro-batch as the last stage reported it.
struct MicroBatchOutcome {
  int64_t id = 0;
  double loss = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  double at = 0;  // seconds after the pass began
};

struct PassResult : PassTotals {
  // Every training micro-batch, in the order reported (kept for the loss
  // log and for splitting a pass of several epochs into its epochs).
  std::vector<MicroBatchOutcome> kept;

  // The last stage finished micro-batch `id` with this mean loss.
  void Record(int64_t id, double loss, int64_t correct_count,
              int64_t sample_count, bool keep) {
    ++micro_batches;
    fed_samples += sample_count;
    if (keep) {
      kept.push_back({id, loss, correct_count, sample_count,
                      std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - began_)
                          .count()});
    }
    if (!std::isfinite(loss)) {
      ++skipped;
      return;
    }
    loss_sum += loss * sample_count;
    correct += correct_count;
    samples += sample_count;
  }
  // Every kept micro-batch's (id, loss).
  std::vector<std::pair<int64_t, double>> losses() const {
    std::vector<std::pair<int64_t, double>> out;
    for (const MicroBatchOutcome& m : kept) out.emplace_back(m.id, m.loss);
    return out;
  }
  // The same epoch trained on in a later pass (after an evaluation inside
  // it): `later`'s totals added, its micro-batches kept after these, its
  // seconds counted after these.
  void Continue(const PassResult& later) {
    AddCounts(later);
    for (MicroBatchOutcome m : later.kept) {
      m.at += seconds;
      kept.push_back(m);
    }
    seconds += later.seconds;
  }
  // The totals alone (progress reports during a pass).
  PassTotals totals() const { return *this; }
  // Adds what replica `replica` of `replicas` did with its dealt share of
  // this pass (PassBatches::Dealt): its micro-batch i is this pass's
  // replica + i replicas. The pass lasts as long as its slowest share; the
  // kept micro-batches stay in the order they finished.
  void Absorb(const PassResult& share, int replica, int replicas) {
    AddCounts(share);
    seconds = std::max(seconds, share.seconds);
    for (MicroBatchOutcome m : share.kept) {
      m.id = replica + m.id * replicas;
      kept.insert(std::upper_bound(
                      kept.begin(), kept.end(), m,
                      [](const MicroBatchOutcome& a,
                         const MicroBatchOutcome& b) { return a.at < b.at; }),
                  m);
    }
  }

 private:
  // Every total but the seconds.
  void AddCounts(const PassTotals& other) {
    micro_batches += other.micro_batches;
    fed_samples += other.fed_samples;
    samples += other.samples;
    correct += other.correct;
    loss_sum += other.loss_sum;
    skipped += other.skipped;
  }

  std::chrono::steady_clock::time_point began_ =
      std::chrono::steady_clock::now();
};

}  // namespace petra::engine

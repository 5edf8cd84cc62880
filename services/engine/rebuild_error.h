// The rebuild's numerical error (training.rebuild_error_every): how far the
// input a reversible stage rebuilds from its output is from the input its
// forward had, with the same weights. Staleness is left out on purpose
// (the weights are the forward's): what remains is arithmetic, of the
// order of fp32 rounding while the residual streams are fp32, whatever
// precision F and G ran in (training.precision).
#pragma once

#include <cstdint>

#include "services/engine/stage_blocks.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

struct RebuildErrorSummary {
  int64_t samples = 0;
  double mean = 0;  // of ||x - x'|| / ||x||
  double max = 0;
};

class RebuildErrorProbe {
 public:
  // Every `every`-th forward, the first included; 0 = never.
  explicit RebuildErrorProbe(uint32_t every) : every_(every) {}

  // Whether the `n`-th forward (0-based) is measured.
  bool Samples(int64_t n) const { return every_ > 0 && n % every_ == 0; }
  // x' = blocks.Inverse(y) (every block reversible), compared with `x`.
  // Reads one number on the host.
  void Measure(const model::TensorPair& x, const model::TensorPair& y,
               StageBlocks& blocks);
  RebuildErrorSummary summary() const;

 private:
  const uint32_t every_;
  int64_t samples_ = 0;
  double sum_ = 0;
  double max_ = 0;
};

// ||x - x'|| / ||x|| over both streams (0 for a zero x).
double RelativeError(const model::TensorPair& x, const model::TensorPair& x2);

}  // namespace petra::engine

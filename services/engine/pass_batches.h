// The micro-batches of one pass through the pipeline: one epoch's, or, in a
// pipeline that stays full across epoch boundaries, several consecutive
// epochs' one after the other. Ids run 0..size()-1 over the whole pass; each
// maps to its epoch and its index within that epoch (what the loss log and
// the data order are keyed by).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/data/batches.h"
#include "services/engine/pass_result.h"

namespace petra::engine {

class PassBatches {
 public:
  struct Part {
    uint32_t epoch = 0;                           // 1-based (0: evaluation)
    const data::EpochBatches* batches = nullptr;  // outlives the pass
    int64_t n = 0;      // n of its micro-batches,
    int64_t first = 0;  // from this one (an epoch resumed part-way)
  };
  explicit PassBatches(std::vector<Part> parts);
  // One epoch's first n micro-batches.
  PassBatches(uint32_t epoch, const data::EpochBatches& batches, int64_t n);

  // The last micro-batch of every `stride` of this pass (stride - 1,
  // 2 stride - 1, ...): the gradient check's micro-batches
  // (EndToEndCheck::Samples).
  PassBatches Strided(int64_t stride) const;
  // Replica `replica` (0-based) of `replicas`' share: micro-batches
  // replica, replica + replicas, ... of this pass, as many for every
  // replica (the pass's last size() % replicas are nobody's). Its id i is
  // this pass's replica + i * replicas.
  PassBatches Dealt(int replica, int replicas) const;

  int64_t size() const {
    const int64_t n =
        size_ > offset_ ? (size_ - offset_ + stride_ - 1) / stride_ : 0;
    return limit_ >= 0 && limit_ < n ? limit_ : n;
  }
  const std::vector<Part>& parts() const { return parts_; }
  // The part `id` falls in and its index within that epoch (counting from
  // the epoch's first micro-batch, not the part's); id in [0, size).
  std::pair<int, int64_t> Locate(int64_t id) const;
  uint32_t EpochOf(int64_t id) const { return parts_[Locate(id).first].epoch; }
  // The batch of pass micro-batch `id` (EpochBatches::Get's errors).
  absl::StatusOr<data::Batch> Get(int64_t id) const;
  // Batches of `id`'s epoch decoded ahead and waiting (EpochBatches::Ready).
  int64_t Ready(int64_t id) const;

 private:
  std::vector<Part> parts_;
  std::vector<int64_t> starts_;  // the first pass id of each part
  int64_t size_ = 0;             // micro-batches before striding
  int64_t stride_ = 1;
  int64_t offset_ = 0;  // micro-batch i of this pass is offset_ + i stride_
  int64_t limit_ = -1;  // at most this many (-1: no limit)
};

// A training pass's result, one per part (epoch), each micro-batch under its
// index within its epoch. An epoch's seconds run from the previous epoch's
// last report (or the pass's start) to its own last report; the last
// epoch's to the pass's end (it includes the pipeline's drain).
std::vector<PassResult> SplitIntoEpochs(const PassResult& whole,
                                        const PassBatches& batches);

}  // namespace petra::engine

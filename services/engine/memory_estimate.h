// A stage's memory, estimated from the model, the micro-batch and the mode
// before anything is allocated, so that a stage server can refuse a job that
// cannot fit (at Assign, with both numbers and what to change) instead of
// failing part-way. Deliberately an estimate of what must be there, not a
// bound: a server refuses only what is beyond its memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "petra/v1/job.pb.h"
#include "services/base/byte_text.h"
#include "services/model/network_summary.h"
#include "services/model/partition.h"

namespace petra::engine {

struct StageMemoryEstimate {
  int64_t micro_batch = 0;
  int64_t in_flight = 0;           // micro-batches between forward and backward
  int64_t parameters_bytes = 0;    // weights, gradients, optimizer state
  bool adamw = false;              // two moments per weight, not momentum
  int64_t input_buffer_bytes = 0;  // inputs kept until their backward
  int64_t weight_stash_bytes = 0;  // weights (or guesses) kept likewise
  // Mode pipeline without recompute: the forwards' graphs kept likewise.
  int64_t activation_bytes = 0;
  int64_t working_bytes = 0;  // one micro-batch's graph, gradients, queues
  int64_t total() const {
    return parameters_bytes + input_buffer_bytes + weight_stash_bytes +
           activation_bytes + working_bytes;
  }
};

// One sample's elements where block `b` hands over (both streams of a pair):
// what crosses the cut after it.
int64_t OutputElements(const model::BlockSummary& b);

// Stage `stage` of `ranges` (the whole network's `blocks`, summarised per
// sample by model::SummarizeBlocks; `input_shape` one sample's input).
StageMemoryEstimate EstimateStageMemory(
    const petra::v1::JobSpec& resolved,
    const std::vector<model::BlockSummary>& blocks,
    const std::vector<model::BlockRange>& ranges, int stage,
    const std::vector<int64_t>& input_shape);

// "weights, gradients and momentum 1.2 GB; ...; working memory 300 MB for a
// micro-batch of 64": what the total is made of.
std::string Breakdown(const StageMemoryEstimate& e);

// "stage 1 needs about 38.2 GB (...) but this server has 5.0 GB (its
// --memory-limit): lower --micro-batch, ..." for a refusal.
std::string DoesNotFit(int stage, const StageMemoryEstimate& e,
                       int64_t capacity_bytes, const std::string& source,
                       const petra::v1::JobSpec& resolved);

// "1.5 GB", "312 MB".
using base::Bytes;

}  // namespace petra::engine

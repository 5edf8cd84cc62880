// What `petra model-info` prints: parameters, and per stage whether it is
// reversible, its parameters, output shape and estimated forward FLOPs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/model/network.h"
#include "services/model/partition.h"

namespace petra::model {

struct BlockSummary {
  std::string kind;
  bool reversible = false;
  int64_t parameters = 0;
  std::vector<int64_t> output_shape;  // per sample; a pair reports one stream
  bool output_is_pair = false;
  int64_t forward_flops = 0;  // per sample
  // Elements written by memory-bound layers, per sample (ScopedFlopCounter).
  int64_t forward_elementwise = 0;
};

// A block's estimated cost in FLOP-equivalents: its FLOPs plus its
// memory-bound elements at kFlopsPerElementwise each. What balances
// `--stages N` by default (deterministic: shapes only, no timing).
double EstimatedCost(const BlockSummary& block);

struct StageSummary {
  int index = 0;
  BlockRange blocks;
  bool reversible = false;  // every block of the stage is reversible
  int64_t parameters = 0;
  std::vector<int64_t> output_shape;
  bool output_is_pair = false;
  int64_t forward_flops = 0;
  int64_t forward_elementwise = 0;
  double estimated_cost = 0;  // EstimatedCost summed over the blocks
};

// Runs one sample through the network (no gradients, running statistics)
// to measure shapes and FLOPs, building one block at a time.
std::vector<BlockSummary> SummarizeBlocks(const NetworkBlueprint& network);

std::vector<StageSummary> SummarizeStages(
    const std::vector<BlockSummary>& blocks,
    const std::vector<BlockRange>& ranges);

int64_t CountParameters(torch::nn::Module& module);

}  // namespace petra::model

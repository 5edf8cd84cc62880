// A stage's state by name, as checkpoints and the export hold it:
// "blocks.<i>.<parameter or buffer>" with i the block's index in the whole
// network, and with the optimizer "optimizer.<same name>.momentum_buffer"
// and, part-way through a k-step accumulation, "grad.<same name>".
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "services/engine/gradient_accumulator.h"
#include "services/engine/stage_blocks.h"

namespace petra::engine {

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;

// `first_block`: the index of the stage's first block in the network.
NamedTensorList NamedStageState(const StageBlocks& blocks, int first_block,
                                const GradientAccumulator& optimizer,
                                bool with_optimizer);

// Restores what NamedStageState(..., true) returned. Every model tensor must
// be present with its shape (INVALID_ARGUMENT naming the first that is not);
// nothing changes unless all are.
absl::Status LoadNamedStageState(
    const std::map<std::string, torch::Tensor>& state, StageBlocks& blocks,
    int first_block, GradientAccumulator& optimizer);

}  // namespace petra::engine

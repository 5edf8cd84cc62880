// What a stage's tensors look like where they cross its boundary: the
// device, the layout (training.memory_format) and the element type between
// stages (training.wire_dtype). A stage puts what arrives in its own form
// and hands on what the next expects, so in-process and fleet runs see the
// same values in the same layout.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "petra/v1/job.pb.h"
#include "services/model/blocks.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

// training.memory_format for a stage on `device`: AUTO is channels_last on
// a CUDA device for a convolutional network.
bool ChannelsLast(const petra::v1::JobSpec& resolved,
                  const torch::Device& device);

// Moves a stage's blocks to `device`, and their convolution weights to
// channels_last with `channels_last`; before anything takes their
// parameters (the optimizer, the backward program).
std::vector<std::shared_ptr<model::Block>> PlaceBlocks(
    std::vector<std::shared_ptr<model::Block>> blocks,
    const torch::Device& device, bool channels_last);

// A tensor that arrives (an input, an output to rebuild from, a gradient):
// on `device`, in fp32 (it may come from a bf16 wire), in the layout.
model::TensorPair Arriving(const model::TensorPair& t,
                           const torch::Device& device, bool channels_last);

// A tensor the stage hands on: rounded to bf16 with `bf16_wire`.
model::TensorPair Departing(model::TensorPair t, bool bf16_wire);

}  // namespace petra::engine

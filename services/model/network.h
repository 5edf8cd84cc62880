// Builds the model zoo: RevNet18/34/50 and ResNet18/34/50 in the imagenet,
// cifar and mnist variants, with a width multiplier, as a list of blocks
// (one stage each in the per-block partition).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/model/architecture_catalog.h"  // InputShape
#include "services/model/blocks.h"

namespace petra::model {

struct Network {
  std::vector<std::shared_ptr<Block>> blocks;
  // One sample's input: {channels, height, width}.
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
};

// `model` must be resolved (job::ResolveJobSpec): variant, width and
// num_classes set. Parameters are drawn from torch's global generator, so
// seed it first (torch::manual_seed) for a deterministic network.
absl::StatusOr<Network> BuildNetwork(const petra::v1::ModelSpec& model);

}  // namespace petra::model

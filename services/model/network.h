// Builds the model zoo: RevNet18/34/50 and ResNet18/34/50 in the imagenet,
// cifar and mnist variants, with a width multiplier, as a list of blocks
// (one stage each in the per-block partition), and RevViT and ViT.
//
// A network is first described (NetworkBlueprint: how to build each block,
// no parameters), then any range of its blocks is built. Each block draws
// its weights from a seed of its own, so a stage that builds only its
// blocks gets the same weights as a process that builds the whole network:
// no process needs to materialise parameters it does not own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/catalog/architecture_catalog.h"  // InputShape
#include "services/model/blocks.h"

namespace petra::model {

struct Network {
  std::vector<std::shared_ptr<Block>> blocks;
  // One sample's input: {channels, height, width}.
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
};

struct NetworkBlueprint {
  // Builds block i with freshly initialised weights (from torch's global
  // generator, as torch::nn's initialisers draw).
  std::vector<std::function<std::shared_ptr<Block>()>> blocks;
  // One sample's {channels, height, width}; a language model's {tokens}.
  std::vector<int64_t> input_shape;
  // What the input holds: pixels (float) or token ids (int64).
  torch::ScalarType input_dtype = torch::kFloat32;
  int64_t num_classes = 0;
  // A language model whose LM head reads the token embedding's weight
  // (tie_embeddings): BuildBlocks ties them when it builds both ends.
  bool tied_ends = false;
  int size() const { return static_cast<int>(blocks.size()); }
};

// A batch of `batch` inputs of the blueprint's shape and dtype, zeros. No
// random draw: another thread may be building blocks from torch's global
// generator (BuildBlocks), and a draw between its seed and its weights
// would change them.
torch::Tensor ExampleInput(const NetworkBlueprint& blueprint, int64_t batch);

// `model` must be resolved (job::ResolveJobSpec): variant, width and
// num_classes set (INVALID_ARGUMENT otherwise). Cheap: nothing is built.
absl::StatusOr<NetworkBlueprint> DescribeNetwork(
    const petra::v1::ModelSpec& model);

// Blocks [begin, end) of `blueprint`, block i's weights drawn from
// BlockSeed(seed, i): the same blocks whatever the range. Leaves torch's
// global generator seeded for the last block built.
// Ties a language model's head to its embedding (tied_ends) when the range
// holds both.
std::vector<std::shared_ptr<Block>> BuildBlocks(
    const NetworkBlueprint& blueprint, int begin, int end, uint64_t seed);

// INVALID_ARGUMENT when blocks [begin, end) hold one tied end but not the
// other: a stage cannot share a tensor with another stage.
absl::Status CheckTiedEnds(const NetworkBlueprint& blueprint, int begin,
                           int end);

// The seed block `index` of a network seeded with `seed` draws its weights
// from.
uint64_t BlockSeed(uint64_t seed, int index);

// The whole network (DescribeNetwork, then BuildBlocks of every block):
// tests, the export and tools that need every block at once.
absl::StatusOr<Network> BuildNetwork(const petra::v1::ModelSpec& model,
                                     uint64_t seed);

}  // namespace petra::model

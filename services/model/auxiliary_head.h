// The auxiliary head of a stage that is not the last (forward gradients'
// local loss, Fournier et al.): a linear classifier on the stage's output,
// globally average-pooled stream by stream. It trains with the stage but is
// not part of the network: the export leaves it out.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "services/model/tensor_pair.h"

namespace petra::model {

// Global average pooling of each stream, concatenated: over space
// ([N, C, H, W]) or tokens ([N, T, D]); a [N, F] stream is kept as it is.
torch::Tensor PooledFeatures(const TensorPair& y);

class AuxiliaryHead {
 public:
  AuxiliaryHead() = default;  // not built: undefined weight and bias
  // torch.nn.Linear(features, classes)'s initialisation,
  // U(-1/sqrt(F), 1/sqrt(F)), drawn on the CPU from a generator seeded with
  // `seed` (the same head on any device, whatever other threads draw), on
  // `device`, with gradients.
  AuxiliaryHead(int64_t features, int64_t classes, uint64_t seed,
                torch::Device device);

  bool built() const { return weight_.defined(); }
  int64_t features() const { return built() ? weight_.size(1) : 0; }
  // Logits of the pooled output, [N, classes].
  torch::Tensor Logits(const TensorPair& y) const;

  // The parameters (for the optimizer, the state names and a restore).
  torch::Tensor& weight() { return weight_; }
  torch::Tensor& bias() { return bias_; }
  const torch::Tensor& weight() const { return weight_; }
  const torch::Tensor& bias() const { return bias_; }
  int64_t parameter_bytes() const;

 private:
  torch::Tensor weight_, bias_;
};

}  // namespace petra::model

// The value crossing a stage boundary: the pair (a, b) of a reversible
// network's two streams, or one tensor (then `b` is undefined).
#pragma once

#include <torch/torch.h>

namespace petra::model {

struct TensorPair {
  torch::Tensor a;
  torch::Tensor b;  // undefined for a single-tensor boundary

  bool is_pair() const { return b.defined(); }
  // Bytes of the defined tensors.
  int64_t nbytes() const {
    return (a.defined() ? a.numel() * a.element_size() : 0) +
           (b.defined() ? b.numel() * b.element_size() : 0);
  }
  TensorPair detach() const {
    return {a.defined() ? a.detach() : a, b.defined() ? b.detach() : b};
  }
};

}  // namespace petra::model

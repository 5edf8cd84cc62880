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
  // The pair on `device`: the same tensors when they are there already (no
  // copy on the CPU path). Copies onto a GPU are stream-ordered; copies to
  // the host wait, so the host never reads a copy still under way.
  TensorPair to(const torch::Device& device) const {
    const bool async = !device.is_cpu();
    return {a.defined() ? a.to(device, async) : a,
            b.defined() ? b.to(device, async) : b};
  }
};

}  // namespace petra::model

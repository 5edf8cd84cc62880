// The value crossing a stage boundary: the pair (a, b) of a reversible
// network's two streams, or one tensor (then `b` is undefined).
#pragma once

#include <torch/torch.h>

namespace petra::model {

// `t` on `device`: itself when it is there already (no copy on the CPU
// path). Copies onto a GPU are stream-ordered; copies to the host wait, so
// the host never reads a copy still under way.
inline torch::Tensor ToDevice(const torch::Tensor& t,
                              const torch::Device& device) {
  return t.defined() ? t.to(device, /*non_blocking=*/!device.is_cpu()) : t;
}

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
  // The pair on `device` (ToDevice on each).
  TensorPair to(const torch::Device& device) const {
    return {ToDevice(a, device), ToDevice(b, device)};
  }
};

}  // namespace petra::model

// The RevNet coupling, and with a stride i-RevNet's invertible downsampling.
#pragma once

#include "services/model/layers.h"
#include "services/model/reversible_block.h"

namespace petra::model {

// (a, b) -> (S(b) + R(a), S(a)); inverse a = S^-1(y2), b = S^-1(y1 - R(a)).
// S squeezes s x s pixels into s^2 x the channels (i-RevNet's invertible
// downsampling) when R has stride s > 1, and is the identity otherwise:
// the RevNet block (a, b) -> (b + R(a), a).
class CouplingBlock : public ReversibleBlock {
 public:
  explicit CouplingBlock(const ResidualOptions& r);
  std::string kind() const override { return "reversible"; }
  TensorPair Forward(const TensorPair& x) override;
  TensorPair Inverse(const TensorPair& y) override;
  std::unique_ptr<PendingVjp> Rebuild(const TensorPair& y) override;

 private:
  class Pending;
  // S and S^-1; S is a permutation, so S^-1 is also its transpose (what
  // applies to gradients).
  torch::Tensor Squeeze(const torch::Tensor& x) const;
  torch::Tensor Unsqueeze(const torch::Tensor& x) const;

  ResidualFunction residual_{nullptr};
  int64_t squeeze_ = 1;
};

}  // namespace petra::model

// A block whose input follows from its output: the interface every
// reversible block kind implements, and all the PETRA stage needs of it. The
// stage worker knows no coupling's algebra; a new kind of reversible block
// (a transformer's, say) is a new class here and touches nothing else.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "services/model/blocks.h"

namespace petra::model {

// One reversible step backward.
struct Rebuilt {
  TensorPair input;       // x, rebuilt from the output (no graph)
  TensorPair input_grad;  // dL/dx
  // dL/dθ in parameters() order; undefined where a parameter had no part.
  std::vector<torch::Tensor> parameter_grads;
};

// The first half of a backward step: the input rebuilt from the output, and
// the recomputed residual functions the second half differentiates. The two
// halves are apart so that a stage can rebuild the block below while this
// one's gradient is computed (PaReprop's overlap).
class PendingVjp {
 public:
  virtual ~PendingVjp() = default;
  // x, rebuilt from the output (no graph).
  const TensorPair& input() const { return input_; }
  // dL/dx and dL/dθ at the rebuilt input, from dL/dy; once.
  virtual Rebuilt Finish(const TensorPair& dy) = 0;

 protected:
  TensorPair input_;
};

class ReversibleBlock : public Block {
 public:
  // x from y = Forward(x), with the current weights. Differentiable; the
  // caller sets the gradient and BatchNorm modes.
  virtual TensorPair Inverse(const TensorPair& y) = 0;
  // The backward a reversible stage runs instead of keeping its input: from
  // the output y, the input x = Inverse(y) from one recompute of each
  // residual function (with its graph), then from dL/dy the input and
  // parameter gradients at x from one vector-Jacobian product of each (not
  // a rebuild then a forward then a backward). BatchNorm runs in the
  // caller's mode (the engine updates the running statistics here). The
  // halves may run on different threads, one after the other.
  virtual std::unique_ptr<PendingVjp> Rebuild(const TensorPair& y) = 0;
  // Both halves at once.
  Rebuilt RebuildWithVjp(const TensorPair& y, const TensorPair& dy) {
    return Rebuild(y)->Finish(dy);
  }
};

}  // namespace petra::model

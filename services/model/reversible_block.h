// A block whose input follows from its output: the interface every
// reversible block kind implements, and all the PETRA stage needs of it. The
// stage worker knows no coupling's algebra; a new kind of reversible block
// (a transformer's, say) is a new class here and touches nothing else.
#pragma once

#include <torch/torch.h>

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

class ReversibleBlock : public Block {
 public:
  // x from y = Forward(x), with the current weights. Differentiable; the
  // caller sets the gradient and BatchNorm modes.
  virtual TensorPair Inverse(const TensorPair& y) = 0;
  // The backward a reversible stage runs instead of keeping its input: from
  // the output y and dL/dy, the input x = Inverse(y) and the input and
  // parameter gradients at x, from one recompute of each residual function
  // (one vector-Jacobian product, not a rebuild then a forward then a
  // backward). BatchNorm runs in the caller's mode (the engine updates the
  // running statistics here).
  virtual Rebuilt RebuildWithVjp(const TensorPair& y, const TensorPair& dy) = 0;
};

}  // namespace petra::model

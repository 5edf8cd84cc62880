// Forward gradients (Fournier et al., "Can Forward Gradient Match
// Backpropagation?"): a stage guesses a direction v for its parameters,
// pushes the tangent of its output along v forward with the activation,
// and gets back d = <dL/dθ, v>, the directional derivative of the global
// loss; d·v is then its gradient estimate. This file holds the parts a
// block and a stage need, with no knowledge of streams or the fleet.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "services/model/blocks.h"
#include "services/model/tensor_pair.h"

namespace petra::model {

// A direction to differentiate a block along: a tangent of its input and
// one of its parameters (in `parameters()` order). An undefined tensor, or
// an empty `parameters`, is a zero tangent.
struct Tangent {
  TensorPair input;
  std::vector<torch::Tensor> parameters;
};

struct TangentOutput {
  TensorPair output;                 // the block's output, detached
  std::vector<TensorPair> tangents;  // J_x t.input + J_θ t.parameters, each
};

// The block's output and, for each of `tangents`, the output's tangent
// (a forward-mode directional derivative; a zero tangent where the output
// does not depend on what moved). The block's Forward runs once, under
// the caller's BatchNorm mode.
//
// By the double-backward trick rather than dual tensors: libtorch's C++ API
// has no forward-mode front end, while every block here is twice
// differentiable. With u a dummy cotangent of the output, g(u) = Jᵀu is
// linear in u, so the gradient of <g(u), t> with respect to u is J t.
// Cost: the forward with a graph, one backward that keeps its own graph,
// then one backward of that per tangent: about 3 forwards' worth of work
// for the first tangent and 1 to 2 for each further one, and the memory of
// a graph of the backward while it runs.
TangentOutput PushTangents(Block& block, const TensorPair& x,
                           const std::vector<Tangent>& tangents);

// A standard Gaussian draw shaped like each of `like`, on its device, from a
// generator of its own seeded with `seed` (drawn on the CPU, so a seed gives
// the same draw on any device and whatever other threads draw meanwhile).
// The random guess: E[<g, v> v] = g for any g, so d·v is an unbiased
// estimate of the gradient.
std::vector<torch::Tensor> RandomGuess(const std::vector<torch::Tensor>& like,
                                       uint64_t seed);

// `direction` scaled to unit norm over all its tensors together (zeros stay
// zeros). The local guess: the local loss's gradient, normalised, so that
// d·v is the projection of the true gradient on it (exact when they are
// parallel).
std::vector<torch::Tensor> Normalised(
    const std::vector<torch::Tensor>& direction);

// <a, b> over all the tensors of two lists of the same shapes, in double.
double Dot(const std::vector<torch::Tensor>& a,
           const std::vector<torch::Tensor>& b);

// The gradient estimate d·v.
std::vector<torch::Tensor> Estimate(double d,
                                    const std::vector<torch::Tensor>& v);

}  // namespace petra::model

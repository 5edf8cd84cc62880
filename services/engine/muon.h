// Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural
// networks"): momentum SGD whose update of a weight matrix is orthogonalised,
// its momentum M = U S V^T replaced by about U V^T (five Newton-Schulz
// iterations), so that every direction of the matrix moves at the same rate.
// Scaled as Liu et al. 2025 ("Muon is Scalable for LLM Training") scale it,
// by 0.2 sqrt(max(rows, cols)), which gives its update AdamW's RMS: the same
// learning rate and decoupled weight decay serve both optimizers.
#pragma once

#include <torch/torch.h>

namespace petra::engine {

// The quintic Newton-Schulz iteration's approximation of U V^T for g = U S
// V^T (Jordan et al.'s coefficients 3.4445, -4.7750, 2.0315), in fp32; a
// tensor of more than two dimensions (a convolution's weight) as the matrix
// of its first dimension by the others.
torch::Tensor Orthogonalize(const torch::Tensor& g, int steps = 5);

// One Muon step of `param` from its gradient: buffer = momentum x buffer +
// grad; the direction u = grad + momentum x buffer (Nesterov) or buffer;
// param = param (1 - lr wd) - lr 0.2 sqrt(max(rows, cols)) Orthogonalize(u).
// `buffer` is updated in place (zeros before the first step).
void MuonStep(torch::Tensor& param, const torch::Tensor& grad,
              torch::Tensor& buffer, double lr, double momentum,
              bool nesterov, double weight_decay);

}  // namespace petra::engine

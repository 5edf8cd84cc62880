#include "services/model/coupling_block.h"

#include "services/model/precision.h"

namespace petra::model {

CouplingBlock::CouplingBlock(const ResidualOptions& r) : squeeze_(r.stride) {
  residual_ = register_module("residual", ResidualFunction(r));
}

torch::Tensor CouplingBlock::Squeeze(const torch::Tensor& x) const {
  return squeeze_ == 1 ? x : torch::pixel_unshuffle(x, squeeze_);
}

torch::Tensor CouplingBlock::Unsqueeze(const torch::Tensor& x) const {
  return squeeze_ == 1 ? x : torch::pixel_shuffle(x, squeeze_);
}

// R's output joins the stream in the stream's dtype (fp32 under bf16
// autocast: precision.h), so the inverse's subtraction undoes the
// forward's addition to fp32 rounding.
TensorPair CouplingBlock::Forward(const TensorPair& x) {
  return {Squeeze(x.b) + AsStream(residual_->forward(x.a), x.b), Squeeze(x.a)};
}

TensorPair CouplingBlock::Inverse(const TensorPair& y) {
  torch::Tensor a = Unsqueeze(y.b);
  return {a, Unsqueeze(y.a - AsStream(residual_->forward(a), y.a))};
}

// a = S^-1(y2) and R(a) with the current weights, b = S^-1(y1 - R(a)); dR's
// vector-Jacobian product with dy1 gives dL/da's R part and dL/dθ. With
// (a, b) -> (S(b) + R(a), S(a)): dL/da = S^T dy2 + R'(a)^T dy1 and
// dL/db = S^T dy1, where S^T = S^-1.
class CouplingBlock::Pending : public PendingVjp {
 public:
  Pending(CouplingBlock& block, const TensorPair& y) : block_(block) {
    a_ = block.Unsqueeze(y.b).detach().requires_grad_(true);
    r_ = AsStream(block.residual_->forward(a_), y.a);
    input_ = {a_.detach(), block.Unsqueeze(y.a - r_.detach())};
  }

  Rebuilt Finish(const TensorPair& dy) override {
    std::vector<torch::Tensor> params = block_.parameters();
    std::vector<torch::Tensor> inputs = {a_};
    inputs.insert(inputs.end(), params.begin(), params.end());
    std::vector<torch::Tensor> grads =
        torch::autograd::grad({r_}, inputs, {dy.a}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    torch::Tensor g2 = block_.Unsqueeze(dy.b);
    Rebuilt out;
    out.input = input_;
    out.input_grad = {grads[0].defined() ? g2 + grads[0] : g2,
                      block_.Unsqueeze(dy.a)};
    out.parameter_grads.assign(grads.begin() + 1, grads.end());
    return out;
  }

 private:
  CouplingBlock& block_;
  torch::Tensor a_, r_;
};

std::unique_ptr<PendingVjp> CouplingBlock::Rebuild(const TensorPair& y) {
  return std::make_unique<Pending>(*this, y);
}

}  // namespace petra::model

#include "services/model/forward_gradient.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace petra::model {
namespace {

// The defined halves of a pair, in order (a, then b).
std::vector<torch::Tensor> Parts(const TensorPair& p) {
  std::vector<torch::Tensor> out;
  if (p.a.defined()) out.push_back(p.a);
  if (p.b.defined()) out.push_back(p.b);
  return out;
}

}  // namespace

TangentOutput PushTangents(Block& block, const TensorPair& x,
                           const std::vector<Tangent>& tangents) {
  torch::AutoGradMode grad_on(true);
  TensorPair in = x.detach();
  for (torch::Tensor* t : {&in.a, &in.b}) {
    if (t->defined() && t->is_floating_point()) t->requires_grad_(true);
  }
  TensorPair y = block.Forward(in);
  TangentOutput out;
  out.output = y.detach();
  auto zero_tangent = [&] {
    return TensorPair{torch::zeros_like(out.output.a),
                      out.output.b.defined() ? torch::zeros_like(out.output.b)
                                             : torch::Tensor()};
  };

  // What a tangent can move: the input's floating halves, then the
  // parameters that take gradients. A slot per half, so that a tangent of
  // b alone still moves b.
  std::vector<torch::Tensor> wrt;
  int half_slot[2] = {-1, -1};
  const torch::Tensor* halves[2] = {&in.a, &in.b};
  for (int h = 0; h < 2; ++h) {
    if (halves[h]->defined() && halves[h]->requires_grad()) {
      half_slot[h] = static_cast<int>(wrt.size());
      wrt.push_back(*halves[h]);
    }
  }
  std::vector<torch::Tensor> params = block.parameters();
  std::vector<int> param_slot(params.size(), -1);
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].requires_grad()) {
      param_slot[i] = static_cast<int>(wrt.size());
      wrt.push_back(params[i]);
    }
  }
  std::vector<torch::Tensor> outputs = Parts(y);
  std::vector<torch::Tensor> dummies;
  bool differentiable = !wrt.empty();
  for (const torch::Tensor& o : outputs) {
    differentiable = differentiable && o.requires_grad();
    dummies.push_back(torch::zeros_like(o).requires_grad_(true));
  }
  if (!differentiable) {
    out.tangents.assign(tangents.size(), zero_tangent());
    return out;
  }
  // g = Jᵀu, kept differentiable in u.
  std::vector<torch::Tensor> g =
      torch::autograd::grad(outputs, wrt, dummies, /*retain_graph=*/true,
                            /*create_graph=*/true, /*allow_unused=*/true);

  for (size_t k = 0; k < tangents.size(); ++k) {
    const Tangent& t = tangents[k];
    const torch::Tensor* in_tangent[2] = {&t.input.a, &t.input.b};
    // <g(u), t> as a sum over the parts that both exist and depend on u.
    std::vector<torch::Tensor> terms, directions;
    auto add = [&](size_t slot, const torch::Tensor& dir) {
      if (!dir.defined() || !g[slot].defined() || !g[slot].requires_grad()) {
        return;
      }
      terms.push_back(g[slot]);
      directions.push_back(dir.to(g[slot].options()));
    };
    for (int h = 0; h < 2; ++h) {
      if (half_slot[h] >= 0) add(half_slot[h], *in_tangent[h]);
    }
    for (size_t i = 0; i < params.size() && i < t.parameters.size(); ++i) {
      if (param_slot[i] >= 0) add(param_slot[i], t.parameters[i]);
    }
    if (terms.empty()) {
      out.tangents.push_back(zero_tangent());
      continue;
    }
    std::vector<torch::Tensor> jt = torch::autograd::grad(
        terms, dummies, directions,
        /*retain_graph=*/k + 1 < tangents.size(), /*create_graph=*/false,
        /*allow_unused=*/true);
    TensorPair tangent = zero_tangent();
    if (jt[0].defined()) tangent.a = jt[0].detach();
    if (jt.size() > 1 && jt[1].defined()) tangent.b = jt[1].detach();
    out.tangents.push_back(std::move(tangent));
  }
  return out;
}

std::vector<torch::Tensor> RandomGuess(const std::vector<torch::Tensor>& like,
                                       uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<torch::Tensor> v;
  v.reserve(like.size());
  for (const torch::Tensor& t : like) {
    v.push_back(torch::randn(t.sizes(), gen, torch::dtype(t.scalar_type()))
                    .to(t.device()));
  }
  return v;
}

double Dot(const std::vector<torch::Tensor>& a,
           const std::vector<torch::Tensor>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!a[i].defined() || !b[i].defined()) continue;
    sum += (a[i].to(torch::kDouble) * b[i].to(torch::kDouble))
               .sum()
               .item<double>();
  }
  return sum;
}

std::vector<torch::Tensor> Normalised(
    const std::vector<torch::Tensor>& direction) {
  const double norm = std::sqrt(Dot(direction, direction));
  std::vector<torch::Tensor> v;
  v.reserve(direction.size());
  for (const torch::Tensor& t : direction) {
    v.push_back(norm > 0 && t.defined() ? t / norm : t);
  }
  return v;
}

std::vector<torch::Tensor> Estimate(double d,
                                    const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> g;
  g.reserve(v.size());
  for (const torch::Tensor& t : v) g.push_back(t.defined() ? t * d : t);
  return g;
}

}  // namespace petra::model

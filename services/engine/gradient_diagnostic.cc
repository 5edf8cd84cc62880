#include "services/engine/gradient_diagnostic.h"

#include <tuple>

#include "services/model/batch_norm.h"

namespace petra::engine {

using model::TensorPair;

void GradientProbe::MaybeSample(int64_t steps, const TensorPair& x,
                                const StageBlocks& blocks,
                                ForwardRecord& record) {
  if (every_ <= 0 || steps % every_ != 0 || steps == last_sampled_step_) {
    return;
  }
  last_sampled_step_ = steps;
  Keep(x, blocks, record);
}

void GradientProbe::Keep(const TensorPair& x, const StageBlocks& blocks,
                         ForwardRecord& record) const {
  torch::NoGradGuard no_grad;
  record.diagnostic_input = {x.a.detach().clone(), x.b.defined()
                                                       ? x.b.detach().clone()
                                                       : torch::Tensor()};
  record.diagnostic_weights = blocks.CopyWeights();
}

std::vector<torch::Tensor> GradientProbe::GradientsBefore(
    const StageBlocks& blocks) const {
  std::vector<torch::Tensor> before;
  for (const torch::Tensor& p : blocks.parameters()) {
    before.push_back(p.grad().defined() ? p.grad().clone()
                                        : torch::zeros_like(p));
  }
  return before;
}

GradientAtPoint GradientAt(StageBlocks& blocks, const TensorPair& input,
                           const std::vector<torch::Tensor>& weights,
                           const TensorPair& output_grad, bool with_input) {
  const std::vector<torch::Tensor>& params = blocks.parameters();
  std::vector<torch::Tensor> current = blocks.CopyWeights();
  blocks.SetWeights(weights);
  TensorPair x = input.detach();
  std::vector<torch::Tensor> wrt = params;
  if (with_input) {
    for (torch::Tensor* t : {&x.a, &x.b}) {
      if (t->defined() && t->is_floating_point()) {
        t->requires_grad_(true);
        wrt.push_back(*t);
      }
    }
  }
  TensorPair y;
  {
    torch::AutoGradMode grad_on(true);
    model::ScopedBnMode mode(model::BnMode::kBatchStats);
    y = blocks.Forward(x);
  }
  // Only outputs that depend on the weights or input (a coupling passes one
  // stream through unchanged).
  std::vector<torch::Tensor> outputs, grads;
  for (const auto& [out, g] :
       {std::pair{y.a, output_grad.a}, std::pair{y.b, output_grad.b}}) {
    if (out.defined() && out.requires_grad()) {
      outputs.push_back(out);
      grads.push_back(g);
    }
  }
  std::vector<torch::Tensor> g = torch::autograd::grad(
      outputs, wrt, grads, false, false, /*allow_unused=*/true);
  blocks.SetWeights(current);
  GradientAtPoint e;
  for (size_t i = 0; i < params.size(); ++i) {
    e.params.push_back(g[i].defined() ? g[i].flatten()
                                      : torch::zeros({params[i].numel()},
                                                     params[i].options()));
  }
  if (with_input) {
    size_t i = params.size();
    for (torch::Tensor* t : {&x.a, &x.b}) {
      torch::Tensor* dst = t == &x.a ? &e.input.a : &e.input.b;
      if (!t->defined() || !t->is_floating_point()) continue;
      *dst = g[i].defined() ? g[i] : torch::zeros_like(*t);
      ++i;
    }
  }
  return e;
}

std::pair<double, double> CosineAndNormRatio(const torch::Tensor& applied,
                                             const torch::Tensor& exact) {
  const double pn = applied.norm().item<double>();
  const double en = exact.norm().item<double>();
  return {
      pn > 0 && en > 0 ? applied.dot(exact).item<double>() / (pn * en) : 0.0,
      en > 0 ? pn / en : 0.0};
}

void GradientProbe::Record(const torch::Tensor& applied,
                           const torch::Tensor& exact, int64_t steps) {
  GradientDiagnostic d;
  d.step = steps;
  std::tie(d.cosine_similarity, d.norm_ratio) =
      CosineAndNormRatio(applied, exact);
  last_ = d;
}

void GradientProbe::Compare(const ForwardRecord& r,
                            const TensorPair& output_grad,
                            const std::vector<torch::Tensor>& before,
                            int64_t steps, StageBlocks& blocks) {
  const std::vector<torch::Tensor>& params = blocks.parameters();
  // PETRA's gradient of this micro-batch: what the backward just added.
  std::vector<torch::Tensor> petra;
  for (size_t i = 0; i < params.size(); ++i) {
    petra.push_back(
        params[i].grad().defined()
            ? (params[i].grad() - before[i]).flatten()
            : torch::zeros({params[i].numel()}, params[i].options()));
  }
  // The backward added (1/k) of it.
  Record(torch::cat(petra),
         torch::cat(GradientAt(blocks, r.diagnostic_input, r.diagnostic_weights,
                               output_grad, false)
                        .params) /
             accumulation_,
         steps);
}

TensorPair GradientProbe::CompareEstimate(
    const ForwardRecord& r, const TensorPair& output_grad,
    const std::vector<torch::Tensor>& applied, int64_t steps, bool with_input,
    StageBlocks& blocks) {
  GradientAtPoint e = GradientAt(blocks, r.diagnostic_input,
                                 r.diagnostic_weights, output_grad, with_input);
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& t : applied) flat.push_back(t.flatten());
  Record(torch::cat(flat), torch::cat(e.params), steps);
  return e.input;
}

}  // namespace petra::engine

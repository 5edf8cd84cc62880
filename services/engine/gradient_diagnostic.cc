#include "services/engine/gradient_diagnostic.h"

#include "services/model/batch_norm.h"

namespace petra::engine {

using model::TensorPair;

void GradientProbe::MaybeSample(int64_t steps, const TensorPair& x,
                                const StageBlocks& blocks,
                                ForwardRecord& record) {
  if (every_ <= 0 || steps % every_ != 0 || steps == last_sampled_step_) {
    return;
  }
  torch::NoGradGuard no_grad;
  last_sampled_step_ = steps;
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
  // The exact delayed gradient: the forward's weights and input, the same
  // delta, BN with batch statistics and its running statistics untouched.
  std::vector<torch::Tensor> current = blocks.CopyWeights();
  blocks.SetWeights(r.diagnostic_weights);
  TensorPair x{r.diagnostic_input.a.detach(),
               r.diagnostic_input.b.defined() ? r.diagnostic_input.b.detach()
                                              : torch::Tensor()};
  TensorPair y;
  {
    model::ScopedBnMode mode(model::BnMode::kBatchStats);
    y = blocks.Forward(x);
  }
  // Only outputs that depend on the weights (a coupling passes one stream
  // through unchanged).
  std::vector<torch::Tensor> outputs, grads;
  for (const auto& [out, g] :
       {std::pair{y.a, output_grad.a}, std::pair{y.b, output_grad.b}}) {
    if (out.defined() && out.requires_grad()) {
      outputs.push_back(out);
      grads.push_back(g);
    }
  }
  std::vector<torch::Tensor> exact = torch::autograd::grad(
      outputs, params, grads, false, false, /*allow_unused=*/true);
  blocks.SetWeights(current);
  torch::Tensor p = torch::cat(petra);
  std::vector<torch::Tensor> flat;
  for (size_t i = 0; i < exact.size(); ++i) {
    flat.push_back(exact[i].defined() ? exact[i].flatten() / accumulation_
                                      : torch::zeros({params[i].numel()},
                                                     params[i].options()));
  }
  torch::Tensor e = torch::cat(flat);
  const double pn = p.norm().item<double>(), en = e.norm().item<double>();
  GradientDiagnostic d;
  d.step = steps;
  d.cosine_similarity =
      pn > 0 && en > 0 ? p.dot(e).item<double>() / (pn * en) : 0.0;
  d.norm_ratio = en > 0 ? pn / en : 0.0;
  last_ = d;
}

}  // namespace petra::engine

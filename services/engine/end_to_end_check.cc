#include "services/engine/end_to_end_check.h"

#include "absl/strings/str_cat.h"
#include "services/engine/gradient_diagnostic.h"
#include "services/engine/stage_memory.h"
#include "services/model/batch_norm.h"
#include "services/model/classification_loss.h"

namespace petra::engine {

using model::TensorPair;

void EndToEndCheck::KeepSample(int64_t id, const StageBlocks& blocks,
                               const std::vector<torch::Tensor>& before) {
  std::vector<torch::Tensor> flat;
  const std::vector<torch::Tensor>& params = blocks.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    flat.push_back(before.empty() || !params[i].grad().defined()
                       ? torch::zeros({params[i].numel()}, params[i].options())
                       : (params[i].grad() - before[i]).flatten());
  }
  // The backward added (1/k) of the micro-batch's gradient.
  samples_[id] = {torch::cat(flat) * accumulation_, blocks.CopyWeights(), {}};
}

int64_t EndToEndCheck::kept_bytes() const {
  int64_t n = 0;
  for (const auto& [id, s] : samples_) {
    n += TensorBytes({s.applied}) + TensorBytes(s.weights);
  }
  return n;
}

absl::StatusOr<EndToEndCheck::Sample*> EndToEndCheck::Find(int64_t i) {
  const int64_t id = TrainingId(i);
  auto it = samples_.find(id);
  if (it == samples_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "gradient check: micro-batch ", i, " (training micro-batch ", id,
        ") was not sampled by the last training pass"));
  }
  return &it->second;
}

absl::StatusOr<TensorPair> EndToEndCheck::Forward(int64_t i,
                                                  const TensorPair& x,
                                                  StageBlocks& blocks) {
  absl::StatusOr<Sample*> s = Find(i);
  if (!s.ok()) return s.status();
  (*s)->input = x.detach();
  const std::vector<torch::Tensor> current = blocks.CopyWeights();
  blocks.SetWeights((*s)->weights);
  TensorPair y;
  {
    torch::NoGradGuard no_grad;
    model::ScopedBnMode mode(model::BnMode::kBatchStats);
    y = blocks.Forward(x);
  }
  blocks.SetWeights(current);
  return y;
}

absl::StatusOr<EndToEndCheck::LossStep> EndToEndCheck::Loss(
    int64_t i, const TensorPair& x, const torch::Tensor& labels,
    StageBlocks& blocks, bool first) {
  absl::StatusOr<TensorPair> logits = Forward(i, x, blocks);
  if (!logits.ok()) return logits.status();
  const torch::Tensor z = logits->a;
  const torch::Tensor dz = model::CrossEntropyGradient(z, labels);
  LossStep out;
  out.loss = model::CrossEntropy(z, labels).item<double>();
  out.correct = model::CorrectCount(z, labels);
  absl::StatusOr<std::pair<TensorPair, TensorPair>> back =
      Backward(i, {dz, {}}, blocks, first);
  if (!back.ok()) return back.status();
  out.input_grad = back->second;
  return out;
}

absl::StatusOr<std::pair<TensorPair, TensorPair>> EndToEndCheck::Backward(
    int64_t i, const TensorPair& output_grad, StageBlocks& blocks, bool first) {
  absl::StatusOr<Sample*> s = Find(i);
  if (!s.ok()) return s.status();
  if (!(*s)->input.a.defined()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gradient check: micro-batch ", i, " came back before its forward"));
  }
  GradientAtPoint g =
      GradientAt(blocks, (*s)->input, (*s)->weights, output_grad, !first);
  TensorPair input = (*s)->input;
  Compare(i, g.params);
  return std::make_pair(input, g.input);
}

void EndToEndCheck::Compare(int64_t i,
                            const std::vector<torch::Tensor>& exact) {
  auto it = samples_.find(TrainingId(i));
  results_.push_back(CosineAndNormRatio(it->second.applied, torch::cat(exact)));
  samples_.erase(it);
}

EndToEndSummary EndToEndCheck::summary() const {
  EndToEndSummary s;
  s.samples = static_cast<int64_t>(results_.size());
  for (const auto& [cosine, ratio] : results_) {
    s.cosine_similarity_mean += cosine;
    s.norm_ratio_mean += ratio;
  }
  if (s.samples > 0) {
    s.cosine_similarity_mean /= s.samples;
    s.norm_ratio_mean /= s.samples;
  }
  return s;
}

}  // namespace petra::engine

#include "services/model/classification_loss.h"

#include "absl/strings/str_cat.h"

namespace petra::model {

absl::Status CheckLabels(const torch::Tensor& labels, int64_t batch) {
  if (labels.dim() < 1 || labels.dim() > 2 || labels.size(0) != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels: ", labels.numel(), " labels for a micro-batch of ", batch));
  }
  return absl::OkStatus();
}

namespace {

// A language model's [batch, tokens, vocab] as [batch x tokens, vocab]:
// one prediction per row.
torch::Tensor Rows(const torch::Tensor& logits) {
  return logits.dim() == 3 ? logits.flatten(0, 1) : logits;
}

}  // namespace

torch::Tensor CrossEntropy(const torch::Tensor& logits,
                           const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(Rows(logits), labels.flatten());
}

int64_t CorrectCount(const torch::Tensor& logits, const torch::Tensor& labels) {
  return logits.argmax(-1).eq(labels).sum().item<int64_t>();
}

torch::Tensor CrossEntropyGradient(const torch::Tensor& logits,
                                   const torch::Tensor& labels) {
  const torch::Tensor rows = Rows(logits);
  torch::Tensor d = torch::softmax(rows, 1);
  d.scatter_add_(1, labels.flatten().unsqueeze(1),
                 -torch::ones({rows.size(0), 1}, rows.options()));
  return d.div_(rows.size(0)).view(logits.sizes());
}

}  // namespace petra::model

#include "services/model/classification_loss.h"

#include "absl/strings/str_cat.h"

namespace petra::model {

absl::Status CheckLabels(const torch::Tensor& labels, int64_t batch) {
  if (labels.dim() != 1 || labels.size(0) != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels: ", labels.numel(), " labels for a micro-batch of ", batch));
  }
  return absl::OkStatus();
}

torch::Tensor CrossEntropy(const torch::Tensor& logits,
                           const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(logits, labels);
}

int64_t CorrectCount(const torch::Tensor& logits, const torch::Tensor& labels) {
  return logits.argmax(1).eq(labels).sum().item<int64_t>();
}

torch::Tensor CrossEntropyGradient(const torch::Tensor& logits,
                                   const torch::Tensor& labels) {
  torch::Tensor d = torch::softmax(logits, 1);
  d.scatter_add_(1, labels.unsqueeze(1),
                 -torch::ones({logits.size(0), 1}, logits.options()));
  return d.div_(logits.size(0));
}

}  // namespace petra::model

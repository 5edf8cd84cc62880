// The training loss, computed here and nowhere else: the mean cross-entropy
// of a micro-batch's logits against its labels, the count it got right, and
// the loss's exact gradient with respect to the logits. The last stage, the
// forward-gradient heads and the end-to-end gradient check all call these.
// A classifier's logits are [batch, classes] and its labels [batch]; a
// language model's [batch, tokens, vocab] and [batch, tokens] (the next
// token at each position), every token one prediction.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "absl/status/status.h"

namespace petra::model {

// INVALID_ARGUMENT unless `labels` holds one label per sample (or per
// token of each sample) of a batch of `batch` ("labels: 3 labels for a
// micro-batch of 4").
absl::Status CheckLabels(const torch::Tensor& labels, int64_t batch);

// Mean cross-entropy over the predictions, a 0-dim tensor with the
// logits' graph (if any).
torch::Tensor CrossEntropy(const torch::Tensor& logits,
                           const torch::Tensor& labels);

// Predictions whose largest logit is their label's.
int64_t CorrectCount(const torch::Tensor& logits, const torch::Tensor& labels);

// d CrossEntropy / d logits, exactly: (softmax - one-hot) / predictions.
torch::Tensor CrossEntropyGradient(const torch::Tensor& logits,
                                   const torch::Tensor& labels);

}  // namespace petra::model

#include "services/model/classification_loss.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::model {
namespace {

TEST(ClassificationLoss, TheGradientIsAutogradsAndTheCountIsRight) {
  torch::manual_seed(3);
  torch::Tensor z = torch::randn({5, 4}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor labels = torch::tensor({0, 3, 1, 1, 2}, torch::kInt64);
  torch::Tensor loss = CrossEntropy(z, labels);
  EXPECT_EQ(loss.dim(), 0);
  loss.backward();
  EXPECT_TRUE(torch::allclose(CrossEntropyGradient(z.detach(), labels),
                              z.grad(), 1e-12, 1e-12));
  const torch::Tensor logits =
      torch::tensor({{2.0, 1.0}, {0.0, 3.0}, {5.0, -1.0}}, torch::kFloat32);
  EXPECT_EQ(CorrectCount(logits, torch::tensor({0, 1, 1})), 2);
}

TEST(ClassificationLoss, LabelsThatDoNotMatchTheBatchAreNamed) {
  EXPECT_TRUE(CheckLabels(torch::zeros({4}, torch::kInt64), 4).ok());
  absl::Status s = CheckLabels(torch::zeros({3}, torch::kInt64), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "labels: 3 labels for a micro-batch of 4");
  // A language model's: a label per token of each sample.
  EXPECT_TRUE(CheckLabels(torch::zeros({2, 5}, torch::kInt64), 2).ok());
  EXPECT_FALSE(CheckLabels(torch::zeros({3, 5}, torch::kInt64), 2).ok());
  EXPECT_FALSE(CheckLabels(torch::zeros({2, 2, 2}, torch::kInt64), 2).ok());
}

// A language model's logits [batch, tokens, vocab]: every token one
// prediction, and the gradient autograd gives.
TEST(ClassificationLoss, EveryTokenOfALanguageModelIsOnePrediction) {
  torch::manual_seed(3);
  torch::Tensor logits = torch::randn({2, 3, 5}, torch::requires_grad());
  torch::Tensor labels = torch::randint(5, {2, 3}, torch::kInt64);
  torch::Tensor loss = CrossEntropy(logits, labels);
  EXPECT_NEAR(loss.item<double>(),
              torch::nn::functional::cross_entropy(logits.view({6, 5}),
                                                   labels.view({6}))
                  .item<double>(),
              1e-6);
  loss.backward();
  torch::Tensor exact = CrossEntropyGradient(logits.detach(), labels);
  EXPECT_EQ(exact.sizes(), logits.sizes());
  EXPECT_TRUE(torch::allclose(exact, logits.grad(), 1e-6, 1e-7));
  EXPECT_EQ(CorrectCount(logits.detach(), logits.detach().argmax(-1)), 6);
}

}  // namespace
}  // namespace petra::model

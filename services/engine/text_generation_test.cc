#include "services/engine/text_generation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>

#include "services/data/dataset.h"
#include "services/data/text_corpus.h"
#include "services/engine/in_process_runner.h"
#include "services/engine/torchscript_export.h"
#include "services/job/job_spec_validation.h"
#include "services/model/architecture_catalog.h"

namespace petra::engine {
namespace {

using ::testing::HasSubstr;

// A small RevLM on the embedded corpus: 2000 sequences of 32 bytes, 3
// epochs.
petra::v1::JobSpec SmallLanguageModel() {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  s.mutable_dataset()->set_train_limit(2000);
  s.mutable_dataset()->set_test_limit(16);
  s.mutable_training()->set_epochs(3);
  s.mutable_partition()->set_stage_count(2);
  petra::v1::TransformerSpec* t = s.mutable_model()->mutable_transformer();
  t->set_embed_dim(32);
  t->set_depth(2);
  t->set_heads(2);
  t->set_seq_len(32);
  s.set_seed(3);
  absl::StatusOr<petra::v1::JobSpec> r = job::ResolveJobSpec(s);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

std::vector<int64_t> Ids(const std::string& text) {
  torch::Tensor t = data::BytesToTokens(text);
  return std::vector<int64_t>(t.data_ptr<int64_t>(),
                              t.data_ptr<int64_t>() + t.numel());
}

// The mean log-likelihood (nats per token) the model gives `continuation`
// after `prompt`, token by token.
double MeanLogLikelihood(TokenModel& model, std::vector<int64_t> text,
                         const std::vector<int64_t>& continuation) {
  double total = 0;
  for (int64_t next : continuation) {
    const size_t window = static_cast<size_t>(model.context_length());
    const size_t from = text.size() > window ? text.size() - window : 0;
    absl::StatusOr<std::vector<float>> logits =
        model.NextLogits(std::vector<int64_t>(text.begin() + from, text.end()));
    EXPECT_TRUE(logits.ok()) << logits.status();
    torch::Tensor l = torch::tensor(*logits, torch::kFloat64);
    total += torch::log_softmax(l, 0)[next].item<double>();
    text.push_back(next);
  }
  return total / static_cast<double>(continuation.size());
}

class TrainedLanguageModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    spec_ = new petra::v1::JobSpec(SmallLanguageModel());
    absl::StatusOr<data::Splits> data = data::LoadForJob(
        *spec_, "", model::InputShape(spec_->model().variant()));
    ASSERT_TRUE(data.ok()) << data.status();
    RunnerOptions o;
    o.threads_per_stage = 1;
    auto runner = InProcessRunner::Create(*spec_, std::move(*data), o);
    ASSERT_TRUE(runner.ok()) << runner.status();
    auto reports = (*runner)->Run();
    ASSERT_TRUE(reports.ok()) << reports.status();
    absl::StatusOr<std::string> bytes = (*runner)->ExportFile();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    export_ = new std::string(std::move(*bytes));
    absl::StatusOr<data::TextSplits> text = data::ReadTextSplits("", "");
    ASSERT_TRUE(text.ok()) << text.status();
    // A passage the job trained on (its first sequences).
    train_text_ = new std::string(text->train.substr(4096, 160));
  }
  static void TearDownTestSuite() {
    delete spec_;
    delete export_;
    delete train_text_;
  }
  static petra::v1::JobSpec* spec_;
  static std::string* export_;
  static std::string* train_text_;
};
petra::v1::JobSpec* TrainedLanguageModel::spec_ = nullptr;
std::string* TrainedLanguageModel::export_ = nullptr;
std::string* TrainedLanguageModel::train_text_ = nullptr;

TEST_F(TrainedLanguageModel, ContinuesTrainingTextBetterThanChance) {
  ASSERT_NE(export_, nullptr);
  absl::StatusOr<std::unique_ptr<TokenModel>> model =
      LoadTokenModel(*export_, *spec_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->vocab(), 256);
  EXPECT_EQ((*model)->context_length(), 32);
  // 80 bytes of prompt (more than the context: the model sees the last
  // 32), then 80 to score.
  const std::vector<int64_t> prompt = Ids(train_text_->substr(0, 80));
  const std::vector<int64_t> rest = Ids(train_text_->substr(80, 80));
  const double trained = MeanLogLikelihood(**model, prompt, rest);
  const double chance = -std::log(256.0);
  std::cout << "continuation: " << trained << " nats a byte (chance " << chance
            << ")\n";
  // Measured after 3 passes over 2000 sequences: -3.5 nats a byte.
  EXPECT_GT(trained, chance + 1.5)
      << "trained " << trained << " nats/byte, chance " << chance;
}

TEST_F(TrainedLanguageModel, SameSeedSameTextOtherSeedOtherText) {
  ASSERT_NE(export_, nullptr);
  auto model = LoadTokenModel(*export_, *spec_);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int64_t> prompt = Ids(train_text_->substr(0, 40));
  SamplingOptions o;
  o.max_new_tokens = 48;
  o.temperature = 1.5;  // spread enough that two seeds part ways
  o.top_k = 64;
  o.seed = 7;
  std::vector<int64_t> seen;
  auto a =
      Generate(**model, prompt, o, [&seen](int64_t id) { seen.push_back(id); });
  auto b = Generate(**model, prompt, o);
  o.seed = 8;
  auto c = Generate(**model, prompt, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->size(), 48u);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, seen);
  EXPECT_NE(*a, *c);
  // Greedy ignores the seed.
  o.temperature = 0;
  auto g1 = Generate(**model, prompt, o);
  o.seed = 9;
  auto g2 = Generate(**model, prompt, o);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(*g1, *g2);
}

// The TorchScript export writes what the plain export writes.
TEST_F(TrainedLanguageModel, TorchScriptExportGivesTheSameLogits) {
  ASSERT_NE(export_, nullptr);
  absl::StatusOr<NamedTensors> tensors = DecodeStateFile(*export_);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  absl::StatusOr<std::string> script = EncodeTorchScript(*spec_, *tensors);
  ASSERT_TRUE(script.ok()) << script.status();
  // The spec is not read for a TorchScript file: a wrong one is harmless.
  petra::v1::JobSpec other = *spec_;
  other.mutable_model()->mutable_transformer()->set_depth(5);
  auto from_script = LoadTokenModel(*script, other);
  ASSERT_TRUE(from_script.ok()) << from_script.status();
  auto from_export = LoadTokenModel(*export_, *spec_);
  ASSERT_TRUE(from_export.ok()) << from_export.status();
  EXPECT_EQ((*from_script)->context_length(), 32);
  EXPECT_EQ((*from_script)->vocab(), 256);
  for (size_t n : {1, 17, 32}) {
    const std::vector<int64_t> context = Ids(train_text_->substr(0, n));
    auto x = (*from_script)->NextLogits(context);
    auto y = (*from_export)->NextLogits(context);
    ASSERT_TRUE(x.ok() && y.ok());
    torch::Tensor dx = torch::tensor(*x), dy = torch::tensor(*y);
    EXPECT_TRUE(torch::allclose(dx, dy, 1e-4, 1e-4))
        << n << ": " << (dx - dy).abs().max().item<double>();
  }
  SamplingOptions o;
  o.max_new_tokens = 24;
  const std::vector<int64_t> prompt = Ids(train_text_->substr(0, 20));
  EXPECT_EQ(*Generate(**from_script, prompt, o),
            *Generate(**from_export, prompt, o));
}

TEST_F(TrainedLanguageModel, BadInputGetsClearErrors) {
  ASSERT_NE(export_, nullptr);
  auto model = LoadTokenModel(*export_, *spec_);
  ASSERT_TRUE(model.ok()) << model.status();
  SamplingOptions o;
  auto r = Generate(**model, {}, o);
  EXPECT_THAT(r.status().message(), HasSubstr("the prompt is empty"));
  r = Generate(**model, {65, 300}, o);
  EXPECT_THAT(r.status().message(),
              HasSubstr("token 300, outside the model's vocabulary of 256"));
  o.temperature = -1;
  r = Generate(**model, {65}, o);
  EXPECT_THAT(r.status().message(), HasSubstr("temperature"));
  o = SamplingOptions();
  o.top_k = -2;
  EXPECT_THAT(Generate(**model, {65}, o).status().message(),
              HasSubstr("top_k"));

  // Another network than the export's: the flag to give says how.
  petra::v1::JobSpec deeper = *spec_;
  deeper.mutable_model()->mutable_transformer()->set_depth(3);
  auto wrong = LoadTokenModel(*export_, deeper);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("--depth"));
  petra::v1::JobSpec shallower = *spec_;
  shallower.mutable_model()->mutable_transformer()->set_depth(1);
  wrong = LoadTokenModel(*export_, shallower);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  // Not a model file at all, and an image classifier's spec.
  wrong = LoadTokenModel("not a model", *spec_);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("neither a plain export"));
  petra::v1::JobSpec image;
  image.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  wrong = LoadTokenModel(*export_, image);
  EXPECT_THAT(wrong.status().message(), HasSubstr("only a language model"));
}

}  // namespace
}  // namespace petra::engine

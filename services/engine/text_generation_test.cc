#include "services/engine/text_generation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "services/base/paths.h"
#include "services/base/subprocess.h"
#include "services/catalog/architecture_catalog.h"
#include "services/data/dataset.h"
#include "services/data/text_corpus.h"
#include "services/engine/in_process_runner.h"
#include "services/engine/torchscript_export.h"
#include "services/job/job_spec_validation.h"

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
        *spec_, "", catalog::InputShape(spec_->model().variant()));
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

  // The export says its network: a spec is not needed, and model flags
  // that say another are refused.
  petra::v1::JobSpec deeper = *spec_;
  deeper.mutable_model()->mutable_transformer()->set_depth(3);
  auto itself = LoadTokenModel(*export_, deeper);
  ASSERT_TRUE(itself.ok()) << itself.status();
  EXPECT_EQ((*itself)->context_length(), 32);
  auto wrong = LoadTokenModel(*export_, deeper, /*resolved_from_flags=*/true);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("(it says so itself), the model flags say revlm "
                        "(embed_dim 32, depth 3"));
  EXPECT_TRUE(LoadTokenModel(*export_, *spec_, true).ok());
  petra::v1::JobSpec image;
  image.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  wrong = LoadTokenModel(*export_, image, true);
  EXPECT_THAT(wrong.status().message(), HasSubstr("leave them out"));

  // An export from before input.model: the flags say the network, and the
  // one to give says how.
  absl::StatusOr<NamedTensors> tensors = DecodeStateFile(*export_);
  ASSERT_TRUE(tensors.ok());
  std::vector<std::pair<std::string, torch::Tensor>> older;
  for (const auto& [name, t] : *tensors) {
    if (name != "input.model" && name != "input.tokenizer") {
      older.emplace_back(name, t);
    }
  }
  absl::StatusOr<std::string> old_export = EncodeStateFile(older);
  ASSERT_TRUE(old_export.ok());
  EXPECT_TRUE(LoadTokenModel(*old_export, *spec_).ok());
  wrong = LoadTokenModel(*old_export, deeper);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("--depth"));
  petra::v1::JobSpec shallower = *spec_;
  shallower.mutable_model()->mutable_transformer()->set_depth(1);
  wrong = LoadTokenModel(*old_export, shallower);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  wrong = LoadTokenModel(*old_export, image);
  EXPECT_THAT(wrong.status().message(), HasSubstr("only a language model"));
  // Not a model file at all.
  wrong = LoadTokenModel("not a model", *spec_);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("neither a plain export"));
}

// A SentencePiece model: its exports carry the tokenizer, and each writes
// the same text through it.
TEST(SentencePieceLanguageModel, ItsExportsCarryTheTokenizerThatWrites) {
  if (!base::RunProgram({"spm_train", "--help"}, "", "").ok()) {
    GTEST_SKIP() << "SentencePiece's tools are not installed (Debian's "
                    "sentencepiece; scripts/install-deps.sh installs it)";
  }
  // A counting rhyme: words a small model learns to continue in 3 epochs.
  const char* const words[] = {"one",   "two",  "buckle", "my", "shoe",
                               "three", "four", "knock",  "at", "the door"};
  std::string text;
  for (int i = 0; i < 20000; ++i) {
    text += words[i % 10];
    text += i % 10 == 9 ? "\n" : " ";
  }
  std::string root = "/tmp/petra_spm_lm_XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  for (const char* split : {"train", "valid"}) {
    std::filesystem::create_directories(root + "/rhyme/" + split);
    std::ofstream(root + "/rhyme/" + split + "/a.txt") << text;
  }
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  s.mutable_dataset()->set_path("rhyme");
  s.mutable_dataset()->mutable_text()->set_tokenizer(
      petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE);
  s.mutable_training()->set_epochs(3);
  s.mutable_training()->set_micro_batch_size(32);
  s.mutable_partition()->set_stage_count(2);
  petra::v1::TransformerSpec* t = s.mutable_model()->mutable_transformer();
  t->set_embed_dim(32);
  t->set_depth(2);
  t->set_heads(2);
  t->set_seq_len(16);
  t->set_vocab(280);
  s.set_seed(3);
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(s);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, root, catalog::InputShape(spec->model().variant()));
  ASSERT_TRUE(base::RemoveTree(root).ok());
  ASSERT_TRUE(data.ok()) << data.status();
  RunnerOptions o;
  o.threads_per_stage = 1;
  auto runner = InProcessRunner::Create(*spec, std::move(*data), o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_TRUE((*runner)->Run().ok());
  absl::StatusOr<std::string> exported = (*runner)->ExportFile();
  ASSERT_TRUE(exported.ok()) << exported.status();

  // No spec but the default: the export says it all.
  petra::v1::JobSpec any;
  any.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  any.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  absl::StatusOr<petra::v1::JobSpec> defaults = job::ResolveJobSpec(any);
  ASSERT_TRUE(defaults.ok());
  auto model = LoadTokenModel(*exported, *defaults);
  ASSERT_TRUE(model.ok()) << model.status();
  const data::Tokenizer& tokenizer = (*model)->tokenizer();
  EXPECT_EQ(tokenizer.name(), "sentencepiece");
  EXPECT_EQ((*model)->vocab(), 280);
  const std::vector<int64_t> prompt =
      *tokenizer.Encode("one two buckle my shoe three four knock at");
  const std::vector<int64_t> rest = *tokenizer.Encode(" the door\none two");
  const double trained = MeanLogLikelihood(**model, prompt, rest);
  EXPECT_GT(trained, -std::log(280.0) + 2.0) << trained << " nats a token";

  absl::StatusOr<NamedTensors> tensors = DecodeStateFile(*exported);
  ASSERT_TRUE(tensors.ok());
  absl::StatusOr<std::string> script = EncodeTorchScript(*spec, *tensors);
  ASSERT_TRUE(script.ok()) << script.status();
  auto scripted = LoadTokenModel(*script, *defaults);
  ASSERT_TRUE(scripted.ok()) << scripted.status();
  EXPECT_EQ((*scripted)->tokenizer().model(), tokenizer.model());
  SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 12;
  auto a = Generate(**model, prompt, greedy);
  auto b = Generate(**scripted, prompt, greedy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  absl::StatusOr<std::string> words_out = tokenizer.Decode(*a);
  ASSERT_TRUE(words_out.ok());
  std::cout << "continuation: \"" << *words_out << "\"\n";
}

}  // namespace
}  // namespace petra::engine

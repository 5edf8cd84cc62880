// DATASET_KIND_TEXT: the splits read from a folder, one file or the
// embedded corpus; refusals with what is wrong; sequences and their next
// tokens, from an offset that moves with the epoch.
#include "services/data/text_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "services/base/paths.h"
#include "services/base/subprocess.h"
#include "services/base/utf8.h"
#include "services/data/batches.h"
#include "services/data/tokenizer.h"

namespace petra::data {
namespace {

using ::testing::HasSubstr;

class TextDir {
 public:
  TextDir() {
    std::string tmpl = "/tmp/petra_text_XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TextDir() { base::RemoveTree(path_).IgnoreError(); }
  void Write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories(
        std::filesystem::path(path_ + "/" + name).parent_path());
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

petra::v1::JobSpec TextJob(const std::string& path, uint32_t seq_len) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  s.mutable_model()->mutable_transformer()->set_seq_len(seq_len);
  s.mutable_model()->mutable_transformer()->set_vocab(256);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  s.mutable_dataset()->set_path(path);
  s.set_seed(3);
  return s;
}

TEST(TextCorpus, AFolderIsItsSplitsTxtFilesInSortedOrder) {
  TextDir dir;
  dir.Write("c/train/b.txt", "world ");
  dir.Write("c/train/a.txt", "hello ");
  dir.Write("c/train/notes.md", "not read");
  dir.Write("c/valid/v.txt", "été");
  absl::StatusOr<TextSplits> s = ReadTextSplits("c", dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train, "hello world ");
  EXPECT_EQ(s->valid, "été");
  // The bytes tokenizer: a token per byte (é is two).
  EXPECT_EQ(BytesToTokens(s->valid).numel(), 5);
  EXPECT_EQ(BytesToTokens("A").item<int64_t>(), 65);
}

TEST(TextCorpus, OneFileValidatesOnItsLastTenthFromALineBreak) {
  TextDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  dir.Write("book.txt", text);
  absl::StatusOr<TextSplits> s = ReadTextSplits("book.txt", dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train + s->valid, text);
  EXPECT_EQ(s->train.back(), '\n');  // cut after a line break
  EXPECT_NEAR(static_cast<double>(s->train.size()) / text.size(), 0.9, 0.02);
}

TEST(TextCorpus, BadTextIsRefusedSayingWhat) {
  TextDir dir;
  dir.Write("latin1.txt", std::string("caf\xe9\n", 5) + std::string(64, 'x'));
  absl::StatusOr<TextSplits> s = ReadTextSplits("latin1.txt", dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("latin1.txt is not UTF-8"));

  dir.Write("empty/train/a.txt", "some text");
  dir.Write("empty/valid/a.txt", "");
  s = ReadTextSplits("empty", dir.path());
  EXPECT_THAT(s.status().message(), HasSubstr("valid holds no text"));

  s = ReadTextSplits("missing", dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  s = ReadTextSplits("../etc", dir.path());
  EXPECT_FALSE(s.ok());

  dir.Write("short/train/a.txt", std::string(1000, 'a'));
  dir.Write("short/valid/a.txt", std::string(40, 'b'));
  absl::StatusOr<Splits> loaded = LoadText(TextJob("short", 32), dir.path());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("validation split of " + dir.path() +
                        "/short has 40 tokens, too few for --seq-len 32 (it "
                        "needs at least 65)"));
}

TEST(TextCorpus, BatchesAreSequencesAndTheirNextTokens) {
  TextDir dir;
  std::string text;
  for (int i = 0; i < 4000; ++i) text += static_cast<char>('a' + i % 26);
  dir.Write("abc/train/a.txt", text);
  dir.Write("abc/valid/a.txt", text.substr(0, 500));
  petra::v1::JobSpec job = TextJob("abc", 16);
  job.mutable_dataset()->set_train_limit(100);
  absl::StatusOr<Splits> s = LoadText(job, dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train.size(), 100);          // the limit
  EXPECT_EQ(s->test.size(), 500 / 16 - 1);  // one held back for the offset
  EXPECT_EQ(s->train.text_bytes, 4000);
  BatchOptions o;
  o.batch_size = 8;
  o.seed = 3;
  std::set<int64_t> firsts;
  for (int epoch = 1; epoch <= 4; ++epoch) {
    EpochBatches batches(s->train, o, epoch);
    EXPECT_EQ(batches.size(), 100 / 8);
    absl::StatusOr<Batch> b = batches.Get(0);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->images.sizes(), (std::vector<int64_t>{8, 16}));
    EXPECT_EQ(b->images.scalar_type(), torch::kInt64);
    // Each label is the next letter of its input.
    EXPECT_TRUE(torch::equal(b->labels, (b->images - 'a' + 1) % 26 + 'a'));
    // The same batch whoever asks.
    EXPECT_TRUE(torch::equal(b->images,
                             EpochBatches(s->train, o, epoch).Get(0)->images));
    for (int64_t i = 0; i < 8; ++i) {
      firsts.insert(b->images[i][0].item<int64_t>() - 'a');
    }
  }
  // The offsets move the sequences' first letters about.
  EXPECT_GT(firsts.size(), 3u);
  // Evaluation: no shuffle, offset 0: sequence 0 starts the text.
  o.shuffle = false;
  EXPECT_EQ(EpochBatches(s->test, o, 1).Get(0)->images[0][0].item<int64_t>(),
            'a');
}

// Words of a counting rhyme, line after line: text whose pieces are words.
std::string Rhyme(int lines) {
  const char* const words[] = {"one",  "two",   "buckle", "my",
                               "shoe", "three", "four",   "knock",
                               "at",   "the",   "door"};
  std::string text;
  for (int i = 0; i < lines; ++i) {
    for (int w = 0; w < 4 + i % 5; ++w) {
      text += words[(i * 7 + w * 3) % 11];
      text += ' ';
    }
    text += "\n";
  }
  return text;
}

TEST(TextCorpus, ASentencePieceJobTrainsItsTokenizerOnceAndKeepsIt) {
  if (!base::RunProgram({"spm_train", "--help"}, "", "").ok()) {
    GTEST_SKIP() << "SentencePiece's tools are not installed (Debian's "
                    "sentencepiece; scripts/install-deps.sh installs it)";
  }
  TextDir dir;
  dir.Write("rhyme/train/a.txt", Rhyme(3000));
  dir.Write("rhyme/valid/a.txt", Rhyme(400));
  petra::v1::JobSpec job = TextJob("rhyme", 16);
  job.mutable_dataset()->mutable_text()->set_tokenizer(
      petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE);
  job.mutable_model()->mutable_transformer()->set_vocab(280);
  LoadOptions load;
  load.cache_dir = dir.path() + "/cache";
  std::vector<std::string> said;
  load.on_activity = [&said](const std::string& a) { said.push_back(a); };
  absl::StatusOr<Splits> s = LoadText(job, dir.path(), load);
  ASSERT_TRUE(s.ok()) << s.status();
  // What takes long is said as it begins.
  ASSERT_EQ(said.size(), 2u);
  EXPECT_THAT(said[0], HasSubstr("training the SentencePiece tokenizer (280 "
                                 "pieces) on 0."));
  EXPECT_THAT(said[0], HasSubstr("(kept in " + load.cache_dir +
                                 " for the next job on this text)"));
  EXPECT_THAT(said[1], HasSubstr(" of text into tokens"));
  ASSERT_FALSE(s->tokenizer_model.empty());
  EXPECT_LT(s->train.tokens.max().item<int64_t>(), 280);
  // Pieces longer than a byte: fewer tokens than bytes.
  EXPECT_GT(s->test.bytes_per_token(), 1.05);
  EXPECT_EQ(Dataset().bytes_per_token(), 0.0);  // not text
  int cached = 0;
  for (const auto& e : std::filesystem::directory_iterator(load.cache_dir)) {
    cached += e.path().filename().string().rfind("sentencepiece-", 0) == 0;
  }
  EXPECT_EQ(cached, 1);

  // The cache answers the next load: a model put there is the one used.
  absl::StatusOr<std::string> other = TrainSentencePiece(Rhyme(50), 280);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_NE(*other, s->tokenizer_model);
  for (const auto& e : std::filesystem::directory_iterator(load.cache_dir)) {
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << *other;
  }
  said.clear();
  absl::StatusOr<Splits> from_cache = LoadText(job, dir.path(), load);
  ASSERT_TRUE(from_cache.ok()) << from_cache.status();
  EXPECT_EQ(from_cache->tokenizer_model, *other);
  // No training: only the encoding is said.
  ASSERT_EQ(said.size(), 1u);
  EXPECT_THAT(said[0], HasSubstr("encoding"));
  // The job's own model wins over the cache (a recovery keeps its tokens).
  load.tokenizer_model = s->tokenizer_model;
  absl::StatusOr<Splits> again = LoadText(job, dir.path(), load);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->tokenizer_model, s->tokenizer_model);
  EXPECT_TRUE(torch::equal(again->train.tokens, s->train.tokens));
  // A model of another size than the spec's vocabulary is refused.
  job.mutable_model()->mutable_transformer()->set_vocab(290);
  absl::StatusOr<Splits> mismatch = LoadText(job, dir.path(), load);
  EXPECT_TRUE(absl::IsInvalidArgument(mismatch.status()));
  EXPECT_THAT(
      mismatch.status().message(),
      HasSubstr("has 280 pieces, its model.transformer.vocab says 290"));
}

TEST(TextCorpus, TheEmbeddedCorpusIsReadAsUtf8) {
  if (!std::filesystem::exists(kDefaultTextCorpus)) {
    FAIL() << kDefaultTextCorpus
           << " is missing: scripts/install-deps.sh --only data unpacks it";
  }
  absl::StatusOr<TextSplits> s = ReadTextSplits("", "/nonexistent");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->train.size(), 30u << 20);
  EXPECT_TRUE(base::IsUtf8(s->train) && base::IsUtf8(s->valid));
  EXPECT_THAT(s->train.substr(0, 4096),
              HasSubstr("Collaborative International Dictionary of English"));
}

}  // namespace
}  // namespace petra::data

// The tokenizers: bytes, and SentencePiece trained on a text, which gives
// the same model for the same text, and ids that decode back to the text.
#include "services/data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "services/base/subprocess.h"

namespace petra::data {
namespace {

using ::testing::HasSubstr;

// Lines of words drawn by a fixed LCG: English-like text, some thousands
// of lines, that any test run gets the same.
std::string SomeText() {
  const char* const words[] = {"the",    "reversible", "network", "stage",
                               "token",  "gradient",   "weights", "of",
                               "and",    "a",          "delay",   "builds",
                               "memory", "déjà",       "café",    "€5"};
  uint64_t x = 12345;
  std::string text;
  for (int line = 0; line < 3000; ++line) {
    const int n = 3 + line % 9;
    for (int w = 0; w < n; ++w) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      if (w > 0) text += ' ';
      text += words[(x >> 33) % 16];
    }
    text += line % 50 == 7 ? "\n\n" : "\n";
  }
  return text;
}

bool HasSentencePieceTools() {
  return base::RunProgram({"spm_export_vocab", "--help"}, "", "").ok();
}

TEST(BytesTokenizer, EveryByteIsAToken) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromModel("");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), "bytes");
  EXPECT_EQ((*t)->vocab(), 256);
  EXPECT_TRUE((*t)->model().empty());
  const std::string text = "caf\xC3\xA9\n";
  absl::StatusOr<std::vector<int64_t>> ids = (*t)->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int64_t>{99, 97, 102, 0xC3, 0xA9, 10}));
  EXPECT_EQ(*(*t)->Decode(*ids), text);
  EXPECT_EQ(*(*t)->Decode({104, 300, -1}), "h\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(SentencePieceTokenizer, TheSameTextGivesTheSameModelAndItsTextBack) {
  if (!HasSentencePieceTools()) {
    GTEST_SKIP() << "SentencePiece's tools are not installed (Debian's "
                    "sentencepiece; scripts/install-deps.sh installs it)";
  }
  const std::string text = SomeText();
  absl::StatusOr<std::string> model = TrainSentencePiece(text, 300);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::string> again = TrainSentencePiece(text, 300);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*model, *again) << "the same text gave two models";

  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromModel(*model);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), "sentencepiece");
  EXPECT_EQ((*t)->vocab(), 300);
  EXPECT_EQ((*t)->model(), *model);
  // Pieces longer than a byte: fewer tokens than bytes.
  absl::StatusOr<std::vector<int64_t>> ids = (*t)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_LT(ids->size(), text.size() / 2);
  for (int64_t id : *ids) ASSERT_TRUE(id >= 0 && id < 300) << id;
  EXPECT_EQ(*(*t)->Decode(*ids), text);
  // Text it never saw, line breaks where they fall, no break at the end:
  // characters it has no piece for go by their bytes.
  for (const std::string& unseen :
       {std::string("\xE4\xB8\xAD\xE6\x96\x87 and  two  spaces\n\nthe end"),
        std::string("\n"), std::string("x"), std::string("tab\there\n")}) {
    absl::StatusOr<std::vector<int64_t>> u = (*t)->Encode(unseen);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(*(*t)->Decode(*u), unseen);
  }
  absl::StatusOr<std::vector<int64_t>> none = (*t)->Encode("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // An id past the vocabulary has no piece.
  absl::StatusOr<std::string> odd = (*t)->Decode({(*ids)[0], 300});
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_THAT(*odd, HasSubstr("\xEF\xBF\xBD"));
}

TEST(SentencePieceTokenizer, WhatCannotBeIsRefusedSayingWhy) {
  if (!HasSentencePieceTools()) {
    GTEST_SKIP() << "SentencePiece's tools are not installed (Debian's "
                    "sentencepiece; scripts/install-deps.sh installs it)";
  }
  absl::StatusOr<std::string> too_many =
      TrainSentencePiece("a few words\nand a few more\n", 5000);
  EXPECT_TRUE(absl::IsInvalidArgument(too_many.status())) << too_many.status();
  EXPECT_THAT(too_many.status().message(),
              HasSubstr("--vocab 5000 is more pieces than this text holds: "
                        "at most "));
  absl::StatusOr<std::string> too_few =
      TrainSentencePiece("a few words\nand a few more\n", 261);
  EXPECT_TRUE(absl::IsInvalidArgument(too_few.status())) << too_few.status();
  EXPECT_THAT(too_few.status().message(),
              HasSubstr("--vocab 261 is too few pieces for this text: its "
                        "characters, its 256 byte pieces, <unk>, <s> and "
                        "</s> need at least 2"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> garbage =
      TokenizerFromModel("not a model");
  EXPECT_TRUE(absl::IsInvalidArgument(garbage.status())) << garbage.status();
  EXPECT_THAT(garbage.status().message(),
              HasSubstr("not a SentencePiece model"));
}

}  // namespace
}  // namespace petra::data

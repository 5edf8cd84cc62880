// Tokenizers of the language models (TextSpec.Tokenizer): text to token ids
// and back. Bytes: every byte a token. SentencePiece: a unigram model
// trained once on a job's training split (TrainSentencePiece), kept as its
// serialized model, which the job records and every export carries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace petra::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text`, which Decode gives back exactly.
  virtual absl::StatusOr<std::vector<int64_t>> Encode(
      const std::string& text) const = 0;
  // The text of `ids`; an id outside the vocabulary becomes U+FFFD (and a
  // SentencePiece model's bytes that do not end a UTF-8 character).
  virtual absl::StatusOr<std::string> Decode(
      const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab() const = 0;
  // The serialized model (what TokenizerFromModel reads); empty for bytes.
  virtual const std::string& model() const = 0;
  virtual std::string name() const = 0;  // "bytes", "sentencepiece"
};

// `model` empty: the bytes tokenizer; else a SentencePiece model.
// INVALID_ARGUMENT when it is not one; NOT_FOUND when SentencePiece's tools
// (Debian's sentencepiece) are not installed.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromModel(
    const std::string& model);

// A SentencePiece unigram model of `vocab` pieces trained on `text`'s
// lines, as TextSpec's TOKENIZER_SENTENCEPIECE says (no normalisation,
// spaces kept, byte fallback). The same text and vocab give the same model,
// byte for byte, on any machine. INVALID_ARGUMENT when the text cannot give
// `vocab` pieces, or needs more (naming the bound).
absl::StatusOr<std::string> TrainSentencePiece(const std::string& text,
                                               int64_t vocab);

// Names how TrainSentencePiece trains, for the keys of cached models:
// changed whenever its settings change.
inline constexpr char kSentencePieceRecipe[] =
    "unigram byte_fallback identity threads=4 v1";

}  // namespace petra::data

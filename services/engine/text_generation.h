// A trained language model that writes: an export (or its TorchScript)
// loaded as a next-token model, and sampling from it under a seed.
// Sampling draws from its own generator, never torch's global one, so the
// same seed gives the same text on any thread of any process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/data/tokenizer.h"

namespace petra::engine {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // The logits of the token after `context` (1..context_length() ids, each
  // in [0, vocab())), as float [vocab()].
  virtual absl::StatusOr<std::vector<float>> NextLogits(
      const std::vector<int64_t>& context) = 0;
  // The longest context the model was built for (its --seq-len).
  virtual int64_t context_length() const = 0;
  virtual int64_t vocab() const = 0;
  // The text of its tokens: the export's tokenizer (bytes when it has none).
  const data::Tokenizer& tokenizer() const { return *tokenizer_; }

 protected:
  std::unique_ptr<data::Tokenizer> tokenizer_;
};

// `bytes`: a plain export (state_dict, as `petra export` and `petra train
// --output` write it) or a TorchScript export of a language model. Both
// describe their network and tokenizer (input.model, input.tokenizer); a
// plain export written before input.model existed is the network
// `resolved` describes. `resolved_from_flags`: the user gave `resolved`'s
// model, which must then be the export's. INVALID_ARGUMENT saying what the
// file is not: neither format, not a language model, another network than
// the flags say, a tensor of the wrong shape (with the flag that sizes it).
absl::StatusOr<std::unique_ptr<TokenModel>> LoadTokenModel(
    const std::string& bytes, const petra::v1::JobSpec& resolved,
    bool resolved_from_flags = false);

struct SamplingOptions {
  int64_t max_new_tokens = 200;
  // 0 takes the likeliest token every time (greedy); otherwise logits are
  // divided by it before the softmax.
  double temperature = 0.8;
  // Only the k likeliest tokens may be drawn; 0 = all.
  int64_t top_k = 0;
  uint64_t seed = 1;
};

// The prompt's continuation, `max_new_tokens` ids, each passed to
// `on_token` (may be null) as it is made. The model sees the last
// context_length() ids. INVALID_ARGUMENT for an empty prompt, an id outside
// the vocabulary or a bad option.
absl::StatusOr<std::vector<int64_t>> Generate(
    TokenModel& model, const std::vector<int64_t>& prompt,
    const SamplingOptions& options,
    const std::function<void(int64_t)>& on_token = nullptr);

}  // namespace petra::engine

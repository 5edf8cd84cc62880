// Text for the language models (DATASET_KIND_TEXT): the splits read from a
// folder (train/ and valid/ of .txt files), one file (its last tenth the
// validation split) or the embedded corpus, checked as UTF-8, and turned
// into tokens by the job's tokenizer (tokenizer.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/data/dataset.h"

namespace petra::data {

// The embedded corpus: GCIDE's 40 MB of English (Debian's dict-gcide,
// unpacked by scripts/install-deps.sh). Chosen as the one plain English
// text of that size in the archive: the Bible's package holds its own
// compressed format, and the kernel's documentation is reStructuredText.
inline constexpr char kDefaultTextCorpus[] = "/usr/share/dictd/gcide.dict.dz";
// Where one file is cut: its validation split starts at the first line
// break after this share of its bytes.
inline constexpr double kTrainShare = 0.9;

struct TextSplits {
  std::string train, valid;
  std::string source;  // what was read, for messages
};

// The text of each split. `path` relative to `data_root` (or inside it);
// empty: the embedded corpus. INVALID_ARGUMENT for text that is not UTF-8
// (naming the file) or an empty split; NOT_FOUND for a missing path.
absl::StatusOr<TextSplits> ReadTextSplits(const std::string& path,
                                          const std::string& data_root);

// The bytes tokenizer: token i is byte i, as an int64 [N] tensor.
torch::Tensor BytesToTokens(const std::string& text);

// A resolved text job's splits, cut into model.transformer.seq_len
// sequences (train_limit / test_limit bound their count). A SentencePiece
// tokenizer is load.tokenizer_model, or the one cached in load.cache_dir
// for this text, or trained on the training split (and cached); it comes
// back in Splits::tokenizer_model. INVALID_ARGUMENT when a split is shorter
// than two sequences.
absl::StatusOr<Splits> LoadText(const petra::v1::JobSpec& resolved,
                                const std::string& data_root,
                                const LoadOptions& load = {});

}  // namespace petra::data

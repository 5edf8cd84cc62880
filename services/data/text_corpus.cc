#include "services/data/text_corpus.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"
#include "services/base/small_file.h"
#include "services/base/utf8.h"
#include "services/data/tokenizer.h"

namespace petra::data {
namespace {

namespace fs = std::filesystem;

// `repair`: the embedded corpus, whose GCIDE 0.48 has 3 stray
// Windows-1252 bytes (0x92, a right quote) in 40 MB: each becomes U+FFFD.
// Anyone else's text must be UTF-8.
absl::StatusOr<std::string> ReadUtf8(const fs::path& file,
                                     bool repair = false) {
  absl::StatusOr<std::string> text = ReadMaybeGzipped(file.string());
  if (!text.ok()) return text.status();
  if (repair) return base::ReplaceInvalidUtf8(*text);
  if (!base::IsUtf8(*text)) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.string(), " is not UTF-8 text (a language model reads text)"));
  }
  return text;
}

// A split folder's .txt files in sorted order, one after another.
absl::StatusOr<std::string> ReadFolder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir.string(), " is not a folder"));
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".txt") {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const fs::path& f : files) {
    absl::StatusOr<std::string> text = ReadUtf8(f);
    if (!text.ok()) return text.status();
    out += *text;
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir.string(), " holds no text (.txt files, not all empty)"));
  }
  return out;
}

// A cached tokenizer past this is not one this code wrote.
constexpr int64_t kMaxCachedModelBytes = int64_t{1} << 30;

std::string Megabytes(size_t bytes) {
  return absl::StrFormat("%.1f MB", static_cast<double>(bytes) / 1e6);
}

absl::StatusOr<std::string> SentencePieceModel(const std::string& train,
                                               uint32_t vocab,
                                               const LoadOptions& load) {
  if (!load.tokenizer_model.empty()) return load.tokenizer_model;
  fs::path cache;
  if (!load.cache_dir.empty()) {
    cache = fs::path(load.cache_dir) /
            absl::StrCat("sentencepiece-",
                         base::Sha256Hex(absl::StrCat(kSentencePieceRecipe,
                                                      "\n", vocab, "\n", train))
                             .substr(0, 32),
                         ".model");
    // Any cache that cannot be read is a miss.
    absl::StatusOr<std::string> cached = base::ReadSmallFile(
        cache.string(), kMaxCachedModelBytes, "a cached tokenizer");
    if (cached.ok() && !cached->empty()) return cached;
  }
  if (load.on_activity) {
    load.on_activity(absl::StrCat(
        "training the SentencePiece tokenizer (", vocab, " pieces) on ",
        Megabytes(train.size()), " of text",
        cache.empty() ? ""
                      : absl::StrCat(" (kept in ", load.cache_dir,
                                     " for the next job on this text)")));
  }
  absl::StatusOr<std::string> model = TrainSentencePiece(train, vocab);
  if (!model.ok()) return model.status();
  if (!cache.empty()) {
    std::error_code ec;
    fs::create_directories(cache.parent_path(), ec);
    // A cache that cannot be written only costs the next load a training.
    (void)base::WriteFileAtomically(cache, *model);
  }
  return model;
}

}  // namespace

absl::StatusOr<TextSplits> ReadTextSplits(const std::string& path,
                                          const std::string& data_root) {
  fs::path where = kDefaultTextCorpus;
  if (!path.empty()) {
    absl::StatusOr<fs::path> confined = base::ConfinedPath(
        data_root, path, "dataset.path", base::AbsolutePath::kAllowInsideRoot,
        "--data-root");
    if (!confined.ok()) return confined.status();
    where = *confined;
  }
  TextSplits out;
  out.source = where.string();
  std::error_code ec;
  if (fs::is_directory(where, ec)) {
    absl::StatusOr<std::string> train = ReadFolder(where / "train");
    if (!train.ok()) return train.status();
    absl::StatusOr<std::string> valid = ReadFolder(where / "valid");
    if (!valid.ok()) return valid.status();
    out.train = *std::move(train);
    out.valid = *std::move(valid);
    return out;
  }
  if (!fs::exists(where, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "dataset.path: ", where.string(), " does not exist",
        path.empty() ? " (the embedded corpus: scripts/install-deps.sh "
                       "--only data unpacks it)"
                     : ""));
  }
  absl::StatusOr<std::string> text = ReadUtf8(where, path.empty());
  if (!text.ok()) return text.status();
  // The validation split: from the first line break after 90% of the
  // bytes (a character is never cut: a line break is one byte).
  size_t cut = text->find(
      '\n',
      static_cast<size_t>(static_cast<double>(text->size()) * kTrainShare));
  cut = cut == std::string::npos ? text->size() : cut + 1;
  out.train = text->substr(0, cut);
  out.valid = text->substr(cut);
  if (out.train.empty() || out.valid.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where.string(),
                     ": too little text to hold a training and a "
                     "validation split (its last tenth, from a line "
                     "break, validates)"));
  }
  return out;
}

torch::Tensor BytesToTokens(const std::string& text) {
  torch::Tensor bytes =
      torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  if (!text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  return bytes.to(torch::kInt64);
}

absl::StatusOr<Splits> LoadText(const petra::v1::JobSpec& resolved,
                                const std::string& data_root,
                                const LoadOptions& load) {
  const petra::v1::DatasetSpec& d = resolved.dataset();
  absl::StatusOr<TextSplits> text = ReadTextSplits(d.path(), data_root);
  if (!text.ok()) return text.status();
  const int64_t seq_len = resolved.model().transformer().seq_len();
  Splits s;
  std::unique_ptr<Tokenizer> tokenizer;
  if (d.text().tokenizer() == petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE) {
    absl::StatusOr<std::string> model = SentencePieceModel(
        text->train, resolved.model().transformer().vocab(), load);
    if (!model.ok()) return model.status();
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromModel(*model);
    if (!t.ok()) return t.status();
    if ((*t)->vocab() != resolved.model().transformer().vocab()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the job's SentencePiece tokenizer has ", (*t)->vocab(),
                       " pieces, its model.transformer.vocab says ",
                       resolved.model().transformer().vocab()));
    }
    tokenizer = *std::move(t);
    s.tokenizer_model = *std::move(model);
    if (load.on_activity) {
      load.on_activity(absl::StrCat(
          "encoding ", Megabytes(text->train.size() + text->valid.size()),
          " of text into tokens"));
    }
  }
  for (auto [split, from, limit, name] :
       {std::tuple{&s.train, &text->train, d.train_limit(), "training"},
        std::tuple{&s.test, &text->valid, d.test_limit(), "validation"}}) {
    if (tokenizer == nullptr) {
      split->tokens = BytesToTokens(*from);
    } else {
      absl::StatusOr<std::vector<int64_t>> ids = tokenizer->Encode(*from);
      if (!ids.ok()) return ids.status();
      split->tokens =
          torch::tensor(torch::ArrayRef<int64_t>(*ids), torch::kInt64);
    }
    split->text_bytes = static_cast<int64_t>(from->size());
    split->seq_len = seq_len;
    split->sequence_limit = static_cast<int64_t>(limit);
    split->classes = resolved.model().transformer().vocab();
    if (split->size() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", name, " split of ", text->source, " has ",
                       split->tokens.numel(), " tokens, too few for --seq-len ",
                       seq_len, " (it needs at least ", 2 * seq_len + 1, ")"));
    }
  }
  return s;
}

}  // namespace petra::data

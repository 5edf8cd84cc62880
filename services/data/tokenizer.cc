#include "services/data/tokenizer.h"

#include <stdlib.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"
#include "services/base/small_file.h"
#include "services/base/subprocess.h"

namespace petra::data {
namespace {

namespace fs = std::filesystem;

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
// Fixed, not the cores there are: SentencePiece's model depends on its
// thread count, and a job's text must give one model on any machine
// (kSentencePieceRecipe names it).
constexpr int kTrainingThreads = 4;
// A tokenizer model past this is not one SentencePiece wrote.
constexpr int64_t kMaxModelBytes = int64_t{1} << 30;
constexpr char kInstallHint[] =
    "the sentencepiece tokenizer needs Debian's sentencepiece package; "
    "scripts/install-deps.sh installs it";

class BytesTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int64_t>> Encode(
      const std::string& text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      ids[i] = static_cast<unsigned char>(text[i]);
    }
    return ids;
  }
  absl::StatusOr<std::string> Decode(
      const std::vector<int64_t>& ids) const override {
    std::string out;
    for (int64_t id : ids) {
      if (id >= 0 && id < 256) {
        out.push_back(static_cast<char>(id));
      } else {
        out += kReplacement;
      }
    }
    return out;
  }
  int64_t vocab() const override { return 256; }
  const std::string& model() const override { return model_; }
  std::string name() const override { return "bytes"; }

 private:
  std::string model_;  // none
};

// A private temporary folder, removed with the object.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern =
        (fs::path(tmp != nullptr && *tmp ? tmp : "/tmp") / "petra-spm-XXXXXX")
            .string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot make a temporary folder in ", pattern));
    }
    return TempDir(pattern);
  }
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    if (!path_.empty()) base::RemoveTree(path_).IgnoreError();
  }
  const fs::path& path() const { return path_; }

 private:
  explicit TempDir(fs::path p) : path_(std::move(p)) {}
  fs::path path_;
};

// SentencePiece through Debian's command-line tools: its library bundles a
// protobuf of its own whose exported symbols would collide with the one
// this process links, so it runs in processes of its own.
class SentencePieceTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model) {
    absl::StatusOr<TempDir> dir = TempDir::Make();
    if (!dir.ok()) return dir.status();
    const fs::path file = dir->path() / "tokenizer.model";
    if (absl::Status s = base::WriteFileAtomically(file, model); !s.ok()) {
      return s;
    }
    absl::StatusOr<std::string> syms =
        base::RunProgram({"spm_export_vocab", "--model=" + file.string(),
                          "--output_format=syms"},
                         "", kInstallHint);
    if (!syms.ok()) {
      if (absl::IsNotFound(syms.status())) return syms.status();
      return absl::InvalidArgumentError(
          "the tokenizer is not a SentencePiece model (spm_export_vocab "
          "cannot read it)");
    }
    // "piece<TAB>id" per line, in id order.
    int64_t vocab = 0, newline = -1;
    for (absl::string_view line : absl::StrSplit(*syms, '\n')) {
      if (line.empty()) continue;
      if (line.substr(0, line.find('\t')) == "<0x0A>") newline = vocab;
      ++vocab;
    }
    if (newline < 0) {
      return absl::InvalidArgumentError(
          "the SentencePiece model has no byte pieces (it was not trained "
          "with byte fallback, as petra trains its tokenizers)");
    }
    return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(
        std::move(*dir), file.string(), model, vocab, newline));
  }

  // Each line apart (spm_encode's unit), then its line break as the byte
  // piece <0x0A>: the ids decode back to the text, line breaks included.
  absl::StatusOr<std::vector<int64_t>> Encode(
      const std::string& text) const override {
    std::vector<int64_t> ids;
    if (text.empty()) return ids;
    const bool ends_with_break = text.back() == '\n';
    absl::StatusOr<std::string> out = base::RunProgram(
        {"spm_encode", "--model=" + file_, "--output_format=id"},
        ends_with_break ? text : text + "\n", kInstallHint);
    if (!out.ok()) return out.status();
    ids.reserve(out->size() / 4);
    const char* p = out->data();
    const char* end = p + out->size();
    while (p < end) {
      if (*p == '\n') {
        ids.push_back(newline_);
        ++p;
      } else if (*p == ' ') {
        ++p;
      } else {
        int64_t id = 0;
        auto [next, ec] = std::from_chars(p, end, id);
        if (ec != std::errc() || next == p) {
          return absl::InternalError(
              "spm_encode wrote something other than ids");
        }
        ids.push_back(id);
        p = next;
      }
    }
    if (!ends_with_break && !ids.empty()) ids.pop_back();
    return ids;
  }

  absl::StatusOr<std::string> Decode(
      const std::vector<int64_t>& ids) const override {
    // Ids outside the vocabulary have no piece: U+FFFD, the rest decoded in
    // runs between them.
    std::string out, run;
    auto flush = [&]() -> absl::Status {
      if (run.empty()) return absl::OkStatus();
      absl::StatusOr<std::string> text = base::RunProgram(
          {"spm_decode", "--model=" + file_, "--input_format=id"}, run + "\n",
          kInstallHint);
      if (!text.ok()) return text.status();
      // spm_decode ends each line it decodes with a line break.
      if (!text->empty() && text->back() == '\n') text->pop_back();
      out += *text;
      run.clear();
      return absl::OkStatus();
    };
    for (int64_t id : ids) {
      if (id < 0 || id >= vocab_) {
        if (absl::Status s = flush(); !s.ok()) return s;
        out += kReplacement;
      } else {
        absl::StrAppend(&run, run.empty() ? "" : " ", id);
      }
    }
    if (absl::Status s = flush(); !s.ok()) return s;
    return out;
  }

  int64_t vocab() const override { return vocab_; }
  const std::string& model() const override { return model_; }
  std::string name() const override { return "sentencepiece"; }

 private:
  SentencePieceTokenizer(TempDir dir, std::string file, std::string model,
                         int64_t vocab, int64_t newline)
      : dir_(std::move(dir)),
        file_(std::move(file)),
        model_(std::move(model)),
        vocab_(vocab),
        newline_(newline) {}

  TempDir dir_;
  std::string file_;
  std::string model_;
  int64_t vocab_;
  int64_t newline_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromModel(
    const std::string& model) {
  if (model.empty()) return std::unique_ptr<Tokenizer>(new BytesTokenizer());
  return SentencePieceTokenizer::Load(model);
}

absl::StatusOr<std::string> TrainSentencePiece(const std::string& text,
                                               int64_t vocab) {
  absl::StatusOr<TempDir> dir = TempDir::Make();
  if (!dir.ok()) return dir.status();
  const fs::path input = dir->path() / "train.txt";
  const fs::path prefix = dir->path() / "tokenizer";
  if (absl::Status s = base::WriteFileAtomically(input, text); !s.ok()) {
    return s;
  }
  // Names relative to the folder it runs in: the model records them, and
  // the same text must give the same bytes.
  absl::StatusOr<std::string> log = base::RunProgram(
      {"spm_train", "--input=train.txt", "--model_prefix=tokenizer",
       absl::StrCat("--vocab_size=", vocab), "--model_type=unigram",
       "--byte_fallback=true", "--normalization_rule_name=identity",
       "--remove_extra_whitespaces=false", "--add_dummy_prefix=false",
       absl::StrCat("--num_threads=", kTrainingThreads),
       // A fixed seed: its default draws one, and the same text would give
       // another model every time.
       "--random_seed=1", "--minloglevel=1"},
      "", kInstallHint, dir->path().string());
  if (!log.ok()) {
    // SentencePiece's words for a vocabulary that does not fit, in ours
    // (its own flags are not ours to offer).
    const std::string message(log.status().message());
    int64_t bound = 0;
    size_t at = message.find("smaller than required_chars. ");
    if (at != std::string::npos && sscanf(message.c_str() + at,
                                          "smaller than required_chars. %*d vs "
                                          "%" SCNd64,
                                          &bound) == 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--vocab ", vocab,
          " is too few pieces for this text: its "
          "characters, its 256 byte pieces, <unk>, <s> and </s> need at "
          "least ",
          bound));
    }
    at = message.find("Please set it to a value <= ");
    if (at != std::string::npos &&
        sscanf(message.c_str() + at, "Please set it to a value <= %" SCNd64,
               &bound) == 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--vocab ", vocab, " is more pieces than this text holds: at most ",
          bound));
    }
    return log.status();
  }
  absl::StatusOr<std::string> model = base::ReadSmallFile(
      prefix.string() + ".model", kMaxModelBytes, "a SentencePiece model");
  if (!model.ok() || model->empty()) {
    return absl::InternalError("spm_train wrote no model");
  }
  return model;
}

}  // namespace petra::data

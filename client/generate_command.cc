// `petra generate`: a trained language model continues a prompt, from its
// export or its TorchScript export, each of which says its network and
// tokenizer.
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "client/command_table.h"
#include "services/base/flag_set.h"
#include "services/base/json_text.h"
#include "services/base/small_file.h"
#include "services/base/utf8.h"
#include "services/catalog/architecture_catalog.h"
#include "services/engine/text_generation.h"
#include "services/job/enum_names.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_validation.h"

namespace petra::client {
namespace {

// An export of a large model is gigabytes; anything past this is not one.
constexpr int64_t kMaxModelBytes = int64_t{64} << 30;

}  // namespace

namespace {

constexpr std::array<const char*, 7> kModelFlags = {
    "arch", "embed-dim", "depth", "heads", "mlp-ratio", "seq-len", "vocab"};

// The continuation as it is made: its text so far, printed (unless the
// output is JSON) up to where it may still change (a piece that ends
// mid-character decodes to U+FFFD until the rest comes).
class ContinuationPrinter {
 public:
  ContinuationPrinter(const data::Tokenizer& tokenizer, bool json)
      : tokenizer_(tokenizer), json_(json) {}

  void Add(int64_t id) {
    made_.push_back(id);
    if (!decoded_.ok()) return;
    absl::StatusOr<std::string> text = tokenizer_.Decode(made_);
    if (!text.ok()) {
      decoded_ = text.status();
      return;
    }
    continuation_ = *std::move(text);
    size_t stable = continuation_.size();
    constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    while (
        stable >= printed_ + kReplacement.size() &&
        std::string_view(continuation_).substr(stable - kReplacement.size()) ==
            kReplacement) {
      stable -= kReplacement.size();
    }
    PrintTo(stable);
  }
  // The end: what was held back goes out as it is.
  void Flush() { PrintTo(continuation_.size()); }
  const absl::Status& decoded() const { return decoded_; }

  void PrintJson(const std::string& prompt) const {
    std::string list;
    for (int64_t id : made_) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", id);
    }
    // JSON strings must be UTF-8: a byte model may stop mid-character.
    std::cout << "{\"prompt\": "
              << base::JsonString(base::ReplaceInvalidUtf8(prompt))
              << ", \"continuation\": "
              << base::JsonString(base::ReplaceInvalidUtf8(continuation_))
              << ", \"tokens\": [" << list << "]}\n";
  }

 private:
  void PrintTo(size_t end) {
    if (!json_ && end > printed_) {
      std::fwrite(continuation_.data() + printed_, 1, end - printed_, stdout);
      std::fflush(stdout);
      printed_ = end;
    }
  }

  const data::Tokenizer& tokenizer_;
  const bool json_;
  std::vector<int64_t> made_;
  std::string continuation_;
  size_t printed_ = 0;
  absl::Status decoded_ = absl::OkStatus();
};

// --arch, a language model's only.
void AddLanguageModelFlag(base::FlagSet& flags, petra::v1::JobSpec* spec) {
  const auto* arch =
      google::protobuf::GetEnumDescriptor<petra::v1::Architecture>();
  flags.AddCustom(
      "arch", "revlm|gpt", "revlm", "the export's network",
      [spec, arch](const std::string& v) -> absl::Status {
        absl::StatusOr<int> a = job::ParseEnumShortName(arch, v, "value");
        if (!a.ok()) return a.status();
        if (!catalog::IsLanguageModel(*a)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "\"", v, "\" is not a language model (revlm or gpt)"));
        }
        spec->mutable_model()->set_architecture(
            static_cast<petra::v1::Architecture>(*a));
        return absl::OkStatus();
      });
}

}  // namespace

int RunGenerate(const std::string& program,
                const std::vector<std::string>& args) {
  std::string model_path, prompt;
  bool prompt_given = false, json = false;
  engine::SamplingOptions sampling;
  int64_t seed = static_cast<int64_t>(sampling.seed);
  petra::v1::JobSpec spec;
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  base::FlagSet flags(
      absl::StrCat(program,
                   " generate --model FILE --prompt TEXT [model flags]"),
      "Continues a prompt with a trained language model (revlm or gpt) and\n"
      "prints the prompt and its continuation as they are made.\n\n"
      "--model is the job's export (`petra train --output`, `petra export`)\n"
      "or its TorchScript export (`petra export --format torchscript`). Both\n"
      "carry their network and tokenizer (bytes or sentencepiece); the model\n"
      "flags are for exports written before they did (the values the job was\n"
      "trained with; the defaults are revlm's). The same --seed gives the\n"
      "same text.");
  flags.AddString("model", &model_path,
                  "export or TorchScript file (required)");
  flags.AddCustom("prompt", "TEXT", "", "the text to continue (required)",
                  [&](const std::string& v) {
                    prompt = v;
                    prompt_given = true;
                    return absl::OkStatus();
                  });
  flags.AddInt("max-new-tokens", &sampling.max_new_tokens,
               "tokens to add to the prompt");
  flags.AddDouble("temperature", &sampling.temperature,
                  "divides the logits; 0 = always the likeliest token");
  flags.AddInt("top-k", &sampling.top_k,
               "draw among the k likeliest tokens only; 0 = all");
  flags.AddInt("seed", &seed, "seed of the draws");
  flags.AddBool("json", &json,
                "print {\"prompt\", \"continuation\", \"tokens\"} at the end "
                "instead of the text as it is made");
  AddLanguageModelFlag(flags, &spec);
  job::AddTransformerFlags(
      flags, [&spec] { return spec.mutable_model()->mutable_transformer(); });
  const std::string command = program + " generate";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  auto usage = [&](const std::string& message) {
    std::cerr << command << ": " << message << "\nRun '" << command
              << " --help' for the list of flags.\n";
    return 2;
  };
  if (model_path.empty()) return usage("--model is required");
  if (!prompt_given) return usage("--prompt is required");
  if (prompt.empty()) return usage("--prompt: empty; give some text");
  if (seed < 0) return usage("flag --seed: must be >= 0");
  sampling.seed = static_cast<uint64_t>(seed);

  absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(spec);
  if (!resolved.ok()) {
    std::cerr << command << ": " << resolved.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::string> bytes =
      base::ReadSmallFile(model_path, kMaxModelBytes, "an export");
  if (!bytes.ok()) {
    std::cerr << command << ": --model: " << bytes.status().message() << "\n";
    return 1;
  }
  // The model flags given: the export's own description is checked
  // against them.
  const bool model_flags =
      std::any_of(kModelFlags.begin(), kModelFlags.end(),
                  [&flags](const char* name) { return flags.WasSet(name); });
  absl::StatusOr<std::unique_ptr<engine::TokenModel>> model =
      engine::LoadTokenModel(*bytes, *resolved, model_flags);
  bytes->clear();
  if (!model.ok()) {
    std::cerr << command << ": --model \"" << model_path
              << "\": " << model.status().message() << "\n";
    return 1;
  }
  const data::Tokenizer& tokenizer = (*model)->tokenizer();
  absl::StatusOr<std::vector<int64_t>> tokens = tokenizer.Encode(prompt);
  if (!tokens.ok()) {
    std::cerr << command
              << ": encoding the prompt: " << tokens.status().message() << "\n";
    return 1;
  }
  if (!json) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  }
  ContinuationPrinter printer(tokenizer, json);
  absl::StatusOr<std::vector<int64_t>> out = engine::Generate(
      **model, *tokens, sampling, [&](int64_t id) { printer.Add(id); });
  printer.Flush();
  if (!json) std::printf("\n");
  if (!out.ok()) {
    std::cerr << command << ": " << out.status().message() << "\n";
    return absl::IsInvalidArgument(out.status()) ? 2 : 1;
  }
  if (!printer.decoded().ok()) {
    std::cerr << command << ": decoding: " << printer.decoded().message()
              << "\n";
    return 1;
  }
  if (json) printer.PrintJson(prompt);
  return 0;
}

}  // namespace petra::client

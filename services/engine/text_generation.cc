#include "services/engine/text_generation.h"

#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/catalog/architecture_catalog.h"
#include "services/engine/export_input.h"
#include "services/engine/export_weights.h"
#include "services/engine/state_file.h"
#include "services/job/enum_names.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

std::vector<float> LastPosition(const torch::Tensor& logits, int64_t at) {
  torch::Tensor row = logits[0][at].to(torch::kFloat32).contiguous();
  const float* p = row.data_ptr<float>();
  return std::vector<float>(p, p + row.numel());
}

// The network of the job spec, holding a plain export's weights.
class NetworkTokenModel : public TokenModel {
 public:
  NetworkTokenModel(model::Network net, int64_t context, int64_t vocab,
                    std::unique_ptr<data::Tokenizer> tokenizer)
      : net_(std::move(net)), context_(context), vocab_(vocab) {
    tokenizer_ = std::move(tokenizer);
  }

  absl::StatusOr<std::vector<float>> NextLogits(
      const std::vector<int64_t>& context) override {
    torch::NoGradGuard no_grad;
    model::TensorPair x{torch::tensor(context, torch::kInt64).unsqueeze(0),
                        torch::Tensor()};
    for (auto& block : net_.blocks) x = block->Forward(x);
    return LastPosition(x.a, static_cast<int64_t>(context.size()) - 1);
  }
  int64_t context_length() const override { return context_; }
  int64_t vocab() const override { return vocab_; }

 private:
  model::Network net_;
  int64_t context_;
  int64_t vocab_;
};

// A TorchScript export: traced at its sequence length, so a shorter context
// is right-padded; causal attention keeps the padding from every earlier
// position.
class ScriptTokenModel : public TokenModel {
 public:
  ScriptTokenModel(torch::jit::Module module, int64_t context, int64_t vocab,
                   std::unique_ptr<data::Tokenizer> tokenizer)
      : module_(std::move(module)), context_(context), vocab_(vocab) {
    tokenizer_ = std::move(tokenizer);
  }

  absl::StatusOr<std::vector<float>> NextLogits(
      const std::vector<int64_t>& context) override {
    torch::NoGradGuard no_grad;
    torch::Tensor tokens = torch::zeros({1, context_}, torch::kInt64);
    std::copy(context.begin(), context.end(), tokens.data_ptr<int64_t>());
    try {
      torch::Tensor logits = module_.forward({tokens}).toTensor();
      return LastPosition(logits, static_cast<int64_t>(context.size()) - 1);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("the TorchScript module failed: ",
                                              e.what_without_backtrace()));
    }
  }
  int64_t context_length() const override { return context_; }
  int64_t vocab() const override { return vocab_; }

 private:
  torch::jit::Module module_;
  int64_t context_;
  int64_t vocab_;
};

std::string Described(const petra::v1::ModelSpec& m) {
  return absl::StrCat(job::EnumShortName(m.architecture()), " (",
                      catalog::DescribeSize(m), ")");
}

// The export's tokenizer, which must have the model's vocabulary.
absl::StatusOr<std::unique_ptr<data::Tokenizer>> TokenizerOf(
    const std::string& tokenizer_model, int64_t vocab) {
  absl::StatusOr<std::unique_ptr<data::Tokenizer>> t =
      data::TokenizerFromModel(tokenizer_model);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat("input.tokenizer: ",
                                                        t.status().message()));
  }
  // The bytes tokenizer's 256 ids fit any vocabulary a spec allows it.
  if (!tokenizer_model.empty() && (*t)->vocab() != vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("its tokenizer has ", (*t)->vocab(),
                     " pieces, its network a vocabulary of ", vocab));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<TokenModel>> FromExport(
    const NamedTensors& exported, const petra::v1::JobSpec& resolved,
    bool resolved_from_flags) {
  absl::StatusOr<petra::v1::Preprocessing> input =
      PreprocessingFromTensors(exported);
  if (!input.ok() && !absl::IsNotFound(input.status())) return input.status();
  if (input.ok() && input->input_shape_size() != 1) {
    return absl::InvalidArgumentError(
        "the export is an image classifier's (its input.shape is C, H, W), "
        "not a language model's");
  }
  petra::v1::ModelSpec spec = resolved.model();
  if (input.ok() && input->has_model()) {
    if (resolved_from_flags &&
        input->model().SerializeAsString() != spec.SerializeAsString()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the export is a ", Described(input->model()),
                       " (it says so itself), the model flags say ",
                       Described(spec), ": leave them out"));
    }
    spec = input->model();
  }
  if (!catalog::IsLanguageModel(spec.architecture())) {
    return absl::InvalidArgumentError(
        "only a language model writes text (--arch revlm or gpt)");
  }
  absl::StatusOr<model::Network> net =
      model::BuildNetwork(spec, resolved.seed());
  if (!net.ok()) return net.status();
  if (absl::Status s = LoadExportedWeights(*net, exported); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        s.message(),
        " (give the model flags the job was trained with: --arch, "
        "--embed-dim, --depth, --heads, --mlp-ratio, --seq-len, --vocab)"));
  }
  const petra::v1::TransformerSpec& t = spec.transformer();
  absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer =
      TokenizerOf(input.ok() ? input->tokenizer_model() : "", t.vocab());
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<TokenModel>(new NetworkTokenModel(
      std::move(*net), t.seq_len(), t.vocab(), *std::move(tokenizer)));
}

absl::StatusOr<std::unique_ptr<TokenModel>> FromScript(
    const std::string& bytes) {
  torch::jit::Module module;
  try {
    std::istringstream in(bytes);
    module = torch::jit::load(in);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
  module.eval();
  // Its input.* buffers are the export's: read as an export's are.
  NamedTensors buffers;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    if (b.name.rfind("input.", 0) == 0) buffers[b.name] = b.value;
  }
  absl::StatusOr<petra::v1::Preprocessing> input =
      PreprocessingFromTensors(buffers);
  if (!input.ok() && !absl::IsNotFound(input.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TorchScript module's ", input.status().message()));
  }
  const int64_t context =
      input.ok() && input->input_shape_size() == 1 ? input->input_shape(0) : 0;
  if (context <= 0) {
    return absl::InvalidArgumentError(
        "the TorchScript module is not a language model's (its input.shape "
        "is not {tokens})");
  }
  torch::NoGradGuard no_grad;
  torch::Tensor logits;
  try {
    logits =
        module.forward({torch::zeros({1, context}, torch::kInt64)}).toTensor();
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TorchScript module does not run on ", context,
                     " token ids: ", e.what_without_backtrace()));
  }
  if (logits.dim() != 3 || logits.size(1) != context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TorchScript module returns ", c10::str(logits.sizes()),
        ", not logits [1, ", context, ", vocab]"));
  }
  absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer =
      TokenizerOf(input->tokenizer_model(), logits.size(2));
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<TokenModel>(new ScriptTokenModel(
      std::move(module), context, logits.size(2), *std::move(tokenizer)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenModel>> LoadTokenModel(
    const std::string& bytes, const petra::v1::JobSpec& resolved,
    bool resolved_from_flags) {
  absl::StatusOr<NamedTensors> exported = DecodeStateFile(bytes);
  if (exported.ok()) {
    return FromExport(*exported, resolved, resolved_from_flags);
  }
  absl::StatusOr<std::unique_ptr<TokenModel>> script = FromScript(bytes);
  if (script.ok() || !absl::IsInvalidArgument(script.status()) ||
      script.status().message().rfind("the TorchScript", 0) == 0) {
    return script;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "neither a plain export (", exported.status().message(),
      ") nor a TorchScript export (", script.status().message(), ")"));
}

absl::StatusOr<std::vector<int64_t>> Generate(
    TokenModel& model, const std::vector<int64_t>& prompt,
    const SamplingOptions& options,
    const std::function<void(int64_t)>& on_token) {
  const int64_t vocab = model.vocab();
  if (prompt.empty()) {
    return absl::InvalidArgumentError("the prompt is empty");
  }
  for (int64_t id : prompt) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt holds token ", id,
                       ", outside the model's vocabulary "
                       "of ",
                       vocab));
    }
  }
  if (options.max_new_tokens < 0) {
    return absl::InvalidArgumentError("max_new_tokens must be >= 0");
  }
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return absl::InvalidArgumentError(
        "temperature must be a finite number >= 0 (0 = greedy)");
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError("top_k must be >= 0 (0 = all tokens)");
  }
  // mt19937_64's sequence is fixed by the standard: the same draws on every
  // platform and library.
  std::mt19937_64 draws(options.seed);
  std::vector<int64_t> text = prompt;
  std::vector<int64_t> out;
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  const size_t window = static_cast<size_t>(model.context_length());
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const size_t from = text.size() > window ? text.size() - window : 0;
    absl::StatusOr<std::vector<float>> logits =
        model.NextLogits(std::vector<int64_t>(text.begin() + from, text.end()));
    if (!logits.ok()) return logits.status();
    const std::vector<float>& l = *logits;
    if (!std::all_of(l.begin(), l.end(),
                     [](float v) { return std::isfinite(v); })) {
      return absl::InternalError(
          "the model's logits are not finite (did its training diverge?)");
    }
    // Likeliest first; ties by id, so the order never depends on the sort.
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&l](int64_t a, int64_t b) {
      return l[a] > l[b] || (l[a] == l[b] && a < b);
    });
    int64_t next = order[0];
    if (options.temperature > 0) {
      const size_t k = options.top_k > 0
                           ? std::min<size_t>(options.top_k, order.size())
                           : order.size();
      std::vector<double> weight(k);
      double total = 0;
      for (size_t i = 0; i < k; ++i) {
        weight[i] = std::exp((static_cast<double>(l[order[i]]) - l[order[0]]) /
                             options.temperature);
        total += weight[i];
      }
      // A uniform double in [0, total) from 53 random bits.
      double u = static_cast<double>(draws() >> 11) * 0x1.0p-53 * total;
      size_t i = 0;
      while (i + 1 < k && u >= weight[i]) u -= weight[i++];
      next = order[i];
    }
    text.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
  }
  return out;
}

}  // namespace petra::engine

#include "services/engine/export_input.h"

#include <torch/torch.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "services/base/proto_json.h"

namespace petra::engine {
namespace {

torch::Tensor Bytes(const std::string& bytes) {
  torch::Tensor t =
      torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty())
    std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}

// A uint8 vector's bytes (contiguous, as `get` below gives them).
std::string Text(const torch::Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()),
                     static_cast<size_t>(t.numel()));
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> InputTensors(
    const petra::v1::Preprocessing& p) {
  // A language model's input is {tokens}: ids, nothing to normalise.
  const bool tokens = p.input_shape_size() == 1;
  const int64_t channels =
      p.input_shape_size() > 0 && !tokens ? p.input_shape(0) : 0;
  std::vector<double> mean(p.mean().begin(), p.mean().end());
  std::vector<double> std(p.std().begin(), p.std().end());
  if (mean.empty()) {  // not normalised: the identity
    mean.assign(static_cast<size_t>(channels), 0.0);
    std.assign(static_cast<size_t>(channels), 1.0);
  }
  std::vector<int64_t> shape(p.input_shape().begin(), p.input_shape().end());
  std::string names;
  for (const std::string& n : p.class_names()) {
    names += n;
    names.push_back('\0');
  }
  std::vector<std::pair<std::string, torch::Tensor>> out = {
      {"input.mean", torch::tensor(mean, torch::kFloat64).to(torch::kFloat32)},
      {"input.std", torch::tensor(std, torch::kFloat64).to(torch::kFloat32)},
      {"input.shape", torch::tensor(shape, torch::kInt64)},
      {"input.class_names", Bytes(names)}};
  if (p.has_model()) {
    base::ProtoJsonOptions one_line;
    one_line.pretty = false;
    out.emplace_back("input.model",
                     Bytes(base::ProtoToJson(p.model(), one_line)));
    out.emplace_back("input.tokenizer", Bytes(p.tokenizer_model()));
  }
  return out;
}

absl::StatusOr<petra::v1::Preprocessing> PreprocessingFromTensors(
    const NamedTensors& exported) {
  const char* const kNames[] = {"input.mean", "input.std", "input.shape",
                                "input.class_names"};
  int present = 0;
  for (const char* name : kNames) present += exported.count(name);
  if (present == 0) {
    return absl::NotFoundError("the export holds no input.* tensors");
  }
  auto get = [&](const char* name, torch::ScalarType type,
                 int64_t size) -> absl::StatusOr<torch::Tensor> {
    auto it = exported.find(name);
    if (it == exported.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("export: no tensor \"", name, "\""));
    }
    const torch::Tensor& t = it->second;
    if (t.dim() != 1 || t.scalar_type() != type ||
        (size >= 0 && t.size(0) != size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "export: \"", name, "\" is ", c10::toString(t.scalar_type()), " ",
          c10::str(t.sizes()), ", not a ", c10::toString(type), " vector",
          size >= 0 ? absl::StrCat(" of ", size) : ""));
    }
    return t.contiguous();
  };
  absl::StatusOr<torch::Tensor> shape = get("input.shape", torch::kInt64, -1);
  if (!shape.ok()) return shape.status();
  // {channels, height, width}, or a language model's {tokens}.
  if (shape->numel() != 3 && shape->numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: \"input.shape\" has ", shape->numel(),
        " entries, not 3 (an image's) or 1 (a language model's tokens)"));
  }
  const int64_t channels =
      shape->numel() == 3 ? (*shape)[0].item<int64_t>() : 0;
  absl::StatusOr<torch::Tensor> mean =
      get("input.mean", torch::kFloat32, channels);
  if (!mean.ok()) return mean.status();
  absl::StatusOr<torch::Tensor> std =
      get("input.std", torch::kFloat32, channels);
  if (!std.ok()) return std.status();
  absl::StatusOr<torch::Tensor> names =
      get("input.class_names", torch::kUInt8, -1);
  if (!names.ok()) return names.status();

  petra::v1::Preprocessing p;
  for (int64_t i = 0; i < shape->numel(); ++i) {
    p.add_input_shape(static_cast<uint32_t>((*shape)[i].item<int64_t>()));
  }
  for (int64_t c = 0; c < channels; ++c) {
    p.add_mean((*mean)[c].item<float>());
    p.add_std((*std)[c].item<float>());
  }
  const std::string joined = Text(*names);
  if (!joined.empty() && joined.back() != '\0') {
    return absl::InvalidArgumentError(
        "export: \"input.class_names\" does not end with a NUL");
  }
  for (size_t at = 0; at < joined.size();) {
    const size_t end = joined.find('\0', at);
    p.add_class_names(joined.substr(at, end - at));
    at = end + 1;
  }
  // What describes the network, in exports since it existed.
  if (exported.count("input.model") > 0) {
    absl::StatusOr<torch::Tensor> model = get("input.model", torch::kUInt8, -1);
    if (!model.ok()) return model.status();
    google::protobuf::util::JsonParseOptions strict;
    if (!google::protobuf::util::JsonStringToMessage(Text(*model),
                                                     p.mutable_model(), strict)
             .ok()) {
      return absl::InvalidArgumentError(
          "export: \"input.model\" is not a model spec in JSON");
    }
  }
  if (exported.count("input.tokenizer") > 0) {
    absl::StatusOr<torch::Tensor> tokenizer =
        get("input.tokenizer", torch::kUInt8, -1);
    if (!tokenizer.ok()) return tokenizer.status();
    p.set_tokenizer_model(Text(*tokenizer));
  }
  return p;
}

}  // namespace petra::engine

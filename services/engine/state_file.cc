#include "services/engine/state_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/engine/export_input.h"

namespace petra::engine {
namespace {

constexpr char kMetaStage[] = "meta.stage_index";
constexpr char kMetaSteps[] = "meta.optimizer_steps";
constexpr char kMetaEpoch[] = "meta.epoch";
constexpr char kMetaSamples[] = "meta.samples_seen";

torch::Tensor Scalar(int64_t v) { return torch::tensor(v, torch::kInt64); }

absl::StatusOr<int64_t> ReadScalar(const NamedTensors& t, const char* name) {
  auto it = t.find(name);
  if (it == t.end() || it->second.numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: \"", name, "\" is missing"));
  }
  return it->second.item<int64_t>();
}

// What `write` puts into its sink, gathered in memory.
absl::StatusOr<std::string> InMemory(
    const std::function<absl::Status(const ByteSink&)>& write) {
  std::string bytes;
  absl::Status s = write([&](const char* data, size_t size) {
    bytes.append(data, size);
    return true;
  });
  if (!s.ok()) return s;
  return bytes;
}

}  // namespace

// torch.save's zip layout, as torch::pickle_save writes it, but into a
// sink: the pickle of the dict refers to each tensor's storage by its index
// i, whose bytes are the record "data/<i>"; the pickle is "data.pkl".
absl::Status WriteStateFile(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const ByteSink& sink) {
  try {
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [name, t] : tensors) {
      dict.insert(name, t.detach().to(torch::kCPU).contiguous());
    }
    std::vector<char> pickle;  // names and shapes: small
    torch::jit::Pickler pickler([&](const char* data, size_t size) {
      pickle.insert(pickle.end(), data, data + size);
    });
    pickler.protocol();
    pickler.pushIValue(dict);
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer(
        [&](const void* data, size_t size) -> size_t {
          return sink(static_cast<const char*>(data), size) ? size : 0;
        });
    const std::vector<at::Tensor>& storages = pickler.tensorData();
    for (size_t i = 0; i < storages.size(); ++i) {
      const c10::Storage& storage = storages[i].storage();
      writer.writeRecord(absl::StrCat("data/", i), storage.data(),
                         storage.nbytes());
    }
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("saving state: ", e.what()));
  }
}

absl::StatusOr<std::string> EncodeStateFile(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  return InMemory(
      [&](const ByteSink& sink) { return WriteStateFile(tensors, sink); });
}

absl::StatusOr<NamedTensors> DecodeStateFile(const std::string& bytes) {
  try {
    c10::IValue v =
        torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
    if (!v.isGenericDict()) {
      return absl::InvalidArgumentError(
          "state file: not a dictionary of tensors");
    }
    NamedTensors out;
    for (const auto& entry : v.toGenericDict()) {
      if (!entry.key().isString() || !entry.value().isTensor()) {
        return absl::InvalidArgumentError(
            "state file: an entry is not a name and a tensor");
      }
      out[entry.key().toStringRef()] = entry.value().toTensor();
    }
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("state file: unreadable (", e.what(), ")"));
  }
}

absl::Status WriteStageCheckpoint(const StageWorker& worker,
                                  const StageCheckpointMeta& meta,
                                  const ByteSink& sink) {
  std::vector<std::pair<std::string, torch::Tensor>> t =
      worker.NamedState(true);
  t.emplace_back(kMetaStage, Scalar(meta.stage_index));
  t.emplace_back(kMetaSteps, Scalar(meta.optimizer_steps));
  t.emplace_back(kMetaEpoch, Scalar(meta.epoch));
  t.emplace_back(kMetaSamples, Scalar(meta.samples_seen));
  return WriteStateFile(t, sink);
}

absl::StatusOr<std::string> EncodeStageCheckpoint(
    const StageWorker& worker, const StageCheckpointMeta& meta) {
  return InMemory([&](const ByteSink& sink) {
    return WriteStageCheckpoint(worker, meta, sink);
  });
}

absl::StatusOr<StageCheckpointMeta> RestoreStageCheckpoint(
    const std::string& bytes, StageWorker& worker) {
  absl::StatusOr<NamedTensors> t = DecodeStateFile(bytes);
  if (!t.ok()) return t.status();
  StageCheckpointMeta meta;
  for (auto [name, field] : {std::pair{kMetaStage, &meta.stage_index},
                             std::pair{kMetaSteps, &meta.optimizer_steps},
                             std::pair{kMetaEpoch, &meta.epoch},
                             std::pair{kMetaSamples, &meta.samples_seen}}) {
    absl::StatusOr<int64_t> v = ReadScalar(*t, name);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  if (meta.stage_index != worker.index()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: written by stage ", meta.stage_index,
                     ", restoring stage ", worker.index()));
  }
  if (absl::Status s = worker.LoadNamedState(*t, meta.optimizer_steps);
      !s.ok()) {
    return s;
  }
  return meta;
}

absl::StatusOr<std::string> MergeForExport(
    const std::vector<std::string>& stage_checkpoints,
    const petra::v1::Preprocessing& input) {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (size_t j = 0; j < stage_checkpoints.size(); ++j) {
    absl::StatusOr<NamedTensors> t = DecodeStateFile(stage_checkpoints[j]);
    if (!t.ok()) {
      return absl::Status(
          t.status().code(),
          absl::StrCat("stage ", j, ": ", t.status().message()));
    }
    for (auto& [name, tensor] : *t) {
      if (absl::StartsWith(name, "blocks.")) all.emplace_back(name, tensor);
    }
  }
  // Block order, not the dictionary's lexical order ("blocks.10" < "blocks.2").
  std::stable_sort(all.begin(), all.end(), [](const auto& x, const auto& y) {
    auto block = [](const std::string& n) { return std::atoi(n.c_str() + 7); };
    return block(x.first) < block(y.first);
  });
  for (auto& named : InputTensors(input)) all.push_back(std::move(named));
  return EncodeStateFile(all);
}

}  // namespace petra::engine

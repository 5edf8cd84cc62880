#include "services/engine/state_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/engine/export_input.h"
#include "services/engine/state_file_reader.h"

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
// i, whose bytes are the record "data/<i>"; the pickle is "data.pkl". A
// tensor a StateFileReader described keeps its storage, offset and strides,
// and its record is copied from its file as it is written.
absl::Status WriteStateFile(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const ByteSink& sink) {
  try {
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [name, t] : tensors) {
      dict.insert(name, StateFileReader::IsDescribed(t.storage())
                            ? t
                            : t.detach().to(torch::kCPU).contiguous());
    }
    std::vector<char> pickle;  // names and shapes: small
    torch::jit::Pickler pickler([&](const char* data, size_t size) {
      pickle.insert(pickle.end(), data, data + size);
    });
    pickler.protocol();
    pickler.pushIValue(dict);
    pickler.stop();
    // The writer is never told a write failed: it would throw, and throw
    // again from its destructor (which finishes the archive), ending the
    // process. Once the sink refuses, the rest is dropped and the write
    // fails here.
    bool refused = false;
    caffe2::serialize::PyTorchStreamWriter writer(
        [&](const void* data, size_t size) -> size_t {
          if (!refused && !sink(static_cast<const char*>(data), size)) {
            refused = true;
          }
          return size;
        });
    const std::vector<at::Tensor>& storages = pickler.tensorData();
    for (size_t i = 0; i < storages.size(); ++i) {
      const c10::Storage& storage = storages[i].storage();
      const std::string record = absl::StrCat("data/", i);
      if (!StateFileReader::IsDescribed(storage)) {
        writer.writeRecord(record, storage.data(), storage.nbytes());
        continue;
      }
      // One tensor's bytes in memory at a time.
      absl::StatusOr<std::pair<at::DataPtr, size_t>> bytes =
          StateFileReader::Record(storage);
      if (!bytes.ok()) {
        refused = true;
        return bytes.status();
      }
      if (bytes->second != storage.nbytes()) {
        refused = true;
        return absl::DataLossError(
            absl::StrCat("state file: a record holds ", bytes->second,
                         " bytes where its tensor needs ", storage.nbytes()));
      }
      writer.writeRecord(record, bytes->first.get(), bytes->second);
    }
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
    if (refused) {
      return absl::UnavailableError("saving state: the file took no more");
    }
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

namespace {

absl::StatusOr<NamedTensors> Loaded(
    absl::StatusOr<std::unique_ptr<StateFileReader>> reader) {
  if (!reader.ok()) return reader.status();
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> t =
      (*reader)->Read(StateFileReader::Tensors::kLoaded);
  if (!t.ok()) return t.status();
  return NamedTensors(std::make_move_iterator(t->begin()),
                      std::make_move_iterator(t->end()));
}

}  // namespace

absl::StatusOr<NamedTensors> DecodeStateFile(const std::string& bytes) {
  return Loaded(StateFileReader::OpenBytes(bytes));
}

absl::StatusOr<NamedTensors> ReadStateFile(const std::filesystem::path& file) {
  return Loaded(StateFileReader::Open(file));
}

absl::Status CheckStateFile(const std::filesystem::path& file) {
  absl::StatusOr<std::unique_ptr<StateFileReader>> reader =
      StateFileReader::Open(file);
  if (!reader.ok()) return reader.status();
  return (*reader)->Read(StateFileReader::Tensors::kDescribed).status();
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

namespace {

absl::StatusOr<StageCheckpointMeta> Restore(absl::StatusOr<NamedTensors> t,
                                            StageWorker& worker) {
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

}  // namespace

absl::StatusOr<StageCheckpointMeta> RestoreStageCheckpoint(
    const std::string& bytes, StageWorker& worker) {
  return Restore(DecodeStateFile(bytes), worker);
}

absl::StatusOr<StageCheckpointMeta> RestoreStageCheckpointFile(
    const std::filesystem::path& file, StageWorker& worker) {
  return Restore(ReadStateFile(file), worker);
}

namespace {

// The export from open stage files: each stage's "blocks.*" tensors
// described, then copied record by record.
absl::Status Merge(
    std::vector<absl::StatusOr<std::unique_ptr<StateFileReader>>> readers,
    const petra::v1::Preprocessing& input, const ByteSink& sink) {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (size_t j = 0; j < readers.size(); ++j) {
    absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> t =
        readers[j].ok()
            ? (*readers[j])->Read(StateFileReader::Tensors::kDescribed)
            : readers[j].status();
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
  return WriteStateFile(all, sink);
}

}  // namespace

absl::Status WriteExport(const std::vector<std::filesystem::path>& stage_files,
                         const petra::v1::Preprocessing& input,
                         const ByteSink& sink) {
  std::vector<absl::StatusOr<std::unique_ptr<StateFileReader>>> readers;
  for (const auto& file : stage_files) {
    readers.push_back(StateFileReader::Open(file));
  }
  return Merge(std::move(readers), input, sink);
}

absl::StatusOr<std::string> MergeForExport(
    const std::vector<std::string>& stage_checkpoints,
    const petra::v1::Preprocessing& input) {
  std::vector<absl::StatusOr<std::unique_ptr<StateFileReader>>> readers;
  for (const std::string& bytes : stage_checkpoints) {
    readers.push_back(StateFileReader::OpenBytes(bytes));
  }
  return InMemory([&](const ByteSink& sink) {
    return Merge(std::move(readers), input, sink);
  });
}

}  // namespace petra::engine

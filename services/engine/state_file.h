// Stage state as files: named tensors in torch.save's zip format, which both
// this code (pickle_load) and Python's torch.load read. A stage checkpoint
// holds the stage's parameters, BN statistics, optimizer state and its
// counters ("meta.*" int64 scalars); an export holds the model tensors of
// every stage ("blocks.<i>.<name>") and the model's input ("input.*").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/engine/stage_worker.h"

namespace petra::engine {

// Counters recorded beside a stage's tensors.
struct StageCheckpointMeta {
  int64_t stage_index = 0;
  int64_t optimizer_steps = 0;
  int64_t epoch = 0;         // epochs completed
  int64_t samples_seen = 0;  // training samples fed so far (data cursor)
};

using NamedTensors = std::map<std::string, torch::Tensor>;

// Where a state file's bytes go as they are made; false when it cannot take
// them (the write then fails, and the sink knows why).
using ByteSink = std::function<bool(const char* data, size_t size)>;

// Serialises named tensors (a Python dict of str -> Tensor) into `sink`,
// record by record: each tensor's bytes are written from its own storage,
// so no second copy of the state is ever held.
absl::Status WriteStateFile(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const ByteSink& sink);
// The same, into memory.
absl::StatusOr<std::string> EncodeStateFile(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors);
// Reads a file EncodeStateFile wrote (or Python's torch.save of such a
// dict); INVALID_ARGUMENT when it is not one.
absl::StatusOr<NamedTensors> DecodeStateFile(const std::string& bytes);
// The same from a file on disk, read tensor by tensor (no copy of the
// file is held); NOT_FOUND when it is missing.
absl::StatusOr<NamedTensors> ReadStateFile(const std::filesystem::path& file);
// Whether a file on disk is a state file whole (its pickle reads, and every
// tensor's record is there), reading no tensor's bytes.
absl::Status CheckStateFile(const std::filesystem::path& file);

// A stage's checkpoint streamed into `sink` (a stage server writes it to
// disk piece by piece: the checkpoint costs no memory beyond the stage's).
absl::Status WriteStageCheckpoint(const StageWorker& worker,
                                  const StageCheckpointMeta& meta,
                                  const ByteSink& sink);
absl::StatusOr<std::string> EncodeStageCheckpoint(
    const StageWorker& worker, const StageCheckpointMeta& meta);
// Restores `worker` from a checkpoint and returns its counters.
absl::StatusOr<StageCheckpointMeta> RestoreStageCheckpoint(
    const std::string& bytes, StageWorker& worker);
absl::StatusOr<StageCheckpointMeta> RestoreStageCheckpointFile(
    const std::filesystem::path& file, StageWorker& worker);

// The export: the "blocks.*" tensors of every stage's checkpoint, in order,
// then `input`'s "input.*" tensors (export_input.h), streamed into `sink`
// from the stages' files one tensor at a time: memory for one tensor, not
// for the network.
absl::Status WriteExport(const std::vector<std::filesystem::path>& stage_files,
                         const petra::v1::Preprocessing& input,
                         const ByteSink& sink);
// The same from checkpoints in memory, into memory.
absl::StatusOr<std::string> MergeForExport(
    const std::vector<std::string>& stage_checkpoints,
    const petra::v1::Preprocessing& input);

}  // namespace petra::engine

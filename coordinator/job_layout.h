// Where the coordinator keeps a job's files under --state-dir: the one
// place that spells them out.
//
//   jobs/<id>/job.json                            the job record
//   jobs/<id>/train_log.csv                       every training loss
//   jobs/<id>/model.pt                            the export
//   jobs/<id>/checkpoints/epoch-<e>/stage-<j>.pt  each stage's checkpoint,
//                                  stage-<j>.pt.sha256 its checksum beside it
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace petra::coordinator {

class JobLayout {
 public:
  JobLayout(std::filesystem::path state_dir, std::string job_id)
      : state_dir_(std::move(state_dir)), id_(std::move(job_id)) {}

  // Relative to --state-dir: what a client may name and a record shows.
  static std::string RelativeDirectory(const std::string& job_id);
  static std::string RelativeCheckpoints(const std::string& job_id);
  std::string RelativeCheckpoint(uint32_t epoch) const;
  // The folder of every job, and the folder name that is a checkpoint's.
  static std::filesystem::path JobsRoot(const std::filesystem::path& state_dir);
  static std::string CheckpointName(uint32_t epoch);
  // The epoch of a checkpoint folder named by CheckpointName, if it is one.
  static std::optional<uint32_t> CheckpointEpoch(const std::string& name);
  static std::string StageFileName(int stage);

  std::filesystem::path directory() const;
  std::filesystem::path record() const;
  std::filesystem::path train_log() const;
  std::filesystem::path export_file() const;
  // The TorchScript export, made from export_file() when first asked for.
  std::filesystem::path torchscript_file() const;
  std::filesystem::path checkpoints() const;
  std::filesystem::path checkpoint(uint32_t epoch) const;
  std::filesystem::path stage_file(uint32_t epoch, int stage) const;
  static std::filesystem::path Checksum(const std::filesystem::path& file);

 private:
  std::filesystem::path state_dir_;
  std::string id_;
};

}  // namespace petra::coordinator

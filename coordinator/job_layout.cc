#include "coordinator/job_layout.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace petra::coordinator {

namespace fs = std::filesystem;

std::string JobLayout::RelativeDirectory(const std::string& job_id) {
  return "jobs/" + job_id;
}

std::string JobLayout::RelativeCheckpoints(const std::string& job_id) {
  return RelativeDirectory(job_id) + "/checkpoints";
}

std::string JobLayout::RelativeCheckpoint(uint32_t epoch) const {
  return RelativeCheckpoints(id_) + "/" + CheckpointName(epoch);
}

fs::path JobLayout::JobsRoot(const fs::path& state_dir) {
  return state_dir / "jobs";
}

std::string JobLayout::CheckpointName(uint32_t epoch) {
  return absl::StrCat("epoch-", epoch);
}

std::optional<uint32_t> JobLayout::CheckpointEpoch(const std::string& name) {
  uint32_t epoch = 0;
  if (!absl::StartsWith(name, "epoch-") ||
      !absl::SimpleAtoi(name.substr(6), &epoch)) {
    return std::nullopt;
  }
  return epoch;
}

std::string JobLayout::StageFileName(int stage) {
  return absl::StrCat("stage-", stage, ".pt");
}

fs::path JobLayout::directory() const {
  return state_dir_ / RelativeDirectory(id_);
}
fs::path JobLayout::record() const { return directory() / "job.json"; }
fs::path JobLayout::train_log() const { return directory() / "train_log.csv"; }
fs::path JobLayout::export_file() const { return directory() / "model.pt"; }
fs::path JobLayout::torchscript_file() const {
  return directory() / "model.torchscript.pt";
}
fs::path JobLayout::checkpoints() const {
  return state_dir_ / RelativeCheckpoints(id_);
}
fs::path JobLayout::checkpoint(uint32_t epoch) const {
  return checkpoints() / CheckpointName(epoch);
}
fs::path JobLayout::stage_file(uint32_t epoch, int stage) const {
  return checkpoint(epoch) / StageFileName(stage);
}
fs::path JobLayout::Checksum(const fs::path& file) {
  return file.string() + ".sha256";
}

}  // namespace petra::coordinator

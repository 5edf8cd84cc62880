// The coordinator's copies of a job's checkpoints on its own disk (the
// stages' disks may be gone when the job is exported or recovered): writing
// one epoch's files with their checksums and the export built from them,
// keeping the newest few, and finding the newest usable one to resume from.
// Files are streamed, never held whole: a checkpoint of a network larger
// than the coordinator's memory passes through it.
// Disk only; moving checkpoints to and from the stages is fleet_control's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job_layout.h"
#include "petra/v1/job.pb.h"

namespace petra::coordinator {

class CheckpointStore {
 public:
  explicit CheckpointStore(JobLayout layout) : layout_(std::move(layout)) {}

  // Where stage `stage`'s file of epoch `epoch` is written as it arrives:
  // a folder beside the checkpoints that a resume never reads, so a pull
  // that fails halfway leaves no checkpoint to pass over.
  std::filesystem::path Incoming(uint32_t epoch, int stage) const;
  // Makes the files that arrived (`sha256s`: each stage's, in order) epoch
  // `epoch`'s checkpoint: each file's SHA-256 beside it (so a resume can
  // tell a damaged copy), the folder moved into place whole (replacing one
  // of the same epoch), then the export streamed from the files one tensor
  // at a time. Keeps the newest `keep_last` checkpoints by epoch (at least
  // 1), counting those of an earlier coordinator process. Returns the
  // folder relative to --state-dir. `input`: the model's preprocessing,
  // the export's input.* tensors.
  absl::StatusOr<std::string> Commit(uint32_t epoch,
                                     const std::vector<std::string>& sha256s,
                                     uint32_t keep_last,
                                     const petra::v1::Preprocessing& input);
  // Removes what a pull that failed left in Incoming's folder.
  void Discard(uint32_t epoch) const;

 private:
  std::filesystem::path IncomingFolder(uint32_t epoch) const;

  JobLayout layout_;
};

// The newest checkpoint of job `from_id` under `state_dir` holding one
// readable file per stage (stage-0.pt .. stage-<stages-1>.pt, nothing more).
struct ResumePoint {
  uint32_t epoch = 0;     // epochs the checkpoint had completed
  std::string directory;  // its folder
  std::vector<std::filesystem::path> files;  // each stage's, in order
  std::vector<std::string> skipped;  // newer checkpoints passed over, why
};
// NOT_FOUND when the job has no usable checkpoint (every one found is
// listed with its reason, or "(none written)").
absl::StatusOr<ResumePoint> FindResumePoint(const std::string& state_dir,
                                            const std::string& from_id,
                                            int stages);

}  // namespace petra::coordinator

// The coordinator's copies of a job's checkpoints on its own disk (the
// stages' disks may be gone when the job is exported or recovered): writing
// one epoch's files with their checksums and the export built from them,
// keeping the newest few, and finding the newest usable one to resume from.
// Disk only; moving checkpoints to and from the stages is fleet_control's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job_layout.h"
#include "petra/v1/job.pb.h"

namespace petra::coordinator {

class CheckpointStore {
 public:
  explicit CheckpointStore(JobLayout layout) : layout_(std::move(layout)) {}

  // Writes epoch `epoch`'s checkpoint: each stage's bytes with its SHA-256
  // beside it (so a resume can tell a damaged copy), then the export file
  // built from them, each file atomically. Keeps the newest `keep_last`
  // checkpoints by epoch (at least 1), counting those of an earlier
  // coordinator process. Returns the folder relative to --state-dir.
  // `input`: the model's preprocessing, the export's input.* tensors.
  absl::StatusOr<std::string> Write(uint32_t epoch,
                                    const std::vector<std::string>& stage_files,
                                    uint32_t keep_last,
                                    const petra::v1::Preprocessing& input);

 private:
  JobLayout layout_;
};

// The newest checkpoint of job `from_id` under `state_dir` holding one
// readable file per stage (stage-0.pt .. stage-<stages-1>.pt, nothing more).
struct ResumePoint {
  uint32_t epoch = 0;                // epochs the checkpoint had completed
  std::string directory;             // its folder
  std::vector<std::string> files;    // each stage's bytes, in order
  std::vector<std::string> skipped;  // newer checkpoints passed over, why
};
// NOT_FOUND when the job has no usable checkpoint (every one found is
// listed with its reason, or "(none written)").
absl::StatusOr<ResumePoint> FindResumePoint(const std::string& state_dir,
                                            const std::string& from_id,
                                            int stages);

}  // namespace petra::coordinator

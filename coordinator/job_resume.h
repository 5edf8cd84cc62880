// Resuming a job from another job's checkpoints (checkpoint.resume_from_job):
// which specs may resume which, and the newest usable checkpoint.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::coordinator {

// OK when `spec` may continue the training of `from`: everything that shapes
// the weights or the data order is the same (model, data, partition,
// training mode, optimizer, schedule kind, seed). Name, epochs, max steps,
// evaluation, checkpoint policy, devices and diagnostics may differ.
// FAILED_PRECONDITION naming the fields that differ otherwise.
absl::Status CheckResumable(const petra::v1::JobSpec& from,
                            const petra::v1::JobSpec& spec);

// The newest checkpoint of job `from_id` under `state_dir` holding one
// readable file per stage (stage-0.pt .. stage-<stages-1>.pt, nothing more).
struct ResumePoint {
  uint32_t epoch = 0;                // epochs the checkpoint had completed
  std::string directory;             // its folder
  std::vector<std::string> files;    // each stage's bytes, in order
  std::vector<std::string> skipped;  // newer checkpoints passed over, why
};
// NOT_FOUND when the job has no usable checkpoint (every one found is
// listed with its reason).
absl::StatusOr<ResumePoint> FindResumePoint(const std::string& state_dir,
                                            const std::string& from_id,
                                            int stages);

}  // namespace petra::coordinator

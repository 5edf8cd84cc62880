// A stage server's checkpoint I/O, apart from the job lifecycle: where a
// checkpoint goes under --state-dir, writing it, handing it out in pieces,
// taking one back in pieces, and restoring the worker from it. Which thread
// runs what is the host's choice: torch work on its executor, file reads on
// its I/O thread, never a gRPC reaction.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/stage.pb.h"
#include "stage_server/stage_job.h"

namespace petra::stage_server {

// Names the coordinator chooses (job ids, checkpoint names, paths) become
// paths under --state-dir: plain relative names only.
absl::Status CheckRelativeName(const std::string& name, const char* what);

class StageCheckpoints {
 public:
  explicit StageCheckpoints(std::filesystem::path state_dir)
      : state_dir_(std::move(state_dir)) {}

  struct Target {
    std::filesystem::path file;  // absolute
    std::string path;            // relative to --state-dir, as reported
  };
  // Where `job` writes checkpoint `name`: <job id>/<name>/stage-<j>.pt,
  // refused when it would lead out of --state-dir (through "..", or a
  // symbolic link).
  absl::StatusOr<Target> Where(const StageJob& job,
                               const std::string& name) const;
  // The worker's state with the request's counters, written atomically.
  absl::Status Write(StageJob& job, const petra::v1::CheckpointRequest& request,
                     const Target& target,
                     petra::v1::CheckpointResponse* response) const;
  // One piece of a checkpoint of job `request.job_id()`.
  absl::Status Read(const petra::v1::ReadCheckpointRequest& request,
                    petra::v1::ReadCheckpointResponse* response) const;
  // A file under --state-dir to restore at Assign (restore_checkpoint).
  absl::StatusOr<std::filesystem::path> RestoreFile(
      const std::string& name) const;
  // Restores the worker from the file RestoreFile named.
  static absl::Status RestoreFrom(const std::filesystem::path& file,
                                  const std::string& name, StageJob& job);

  // Adds one uploaded piece of job.upload (pieces come in order; offset 0
  // starts again), written to <job id>/restore/stage-<j>.pt under
  // --state-dir as it comes. The file once its last piece is in, nullopt
  // before.
  absl::StatusOr<std::optional<std::filesystem::path>> AddPiece(
      StageJob& job, const petra::v1::RestoreCheckpointRequest& piece,
      petra::v1::RestoreCheckpointResponse* response) const;
  // Restores the worker from an uploaded file, read tensor by tensor, and
  // removes the file.
  static absl::Status Restore(StageJob& job, const std::filesystem::path& file,
                              petra::v1::RestoreCheckpointResponse* response);

 private:
  std::filesystem::path state_dir_;
};

}  // namespace petra::stage_server

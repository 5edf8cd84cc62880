// The coordinator's jobs: accepts them (validated, with an id), queues them
// while the fleet is busy, runs them one after another on a runner thread,
// and answers for them (get, list, cancel, watch, export). Records are kept
// under --state-dir/jobs/<id>/ and read back at start.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job_record.h"
#include "coordinator/job_runner.h"

namespace petra::coordinator {

class JobManager {
 public:
  explicit JobManager(RunnerEnvironment env);
  ~JobManager();
  // Cancels the running and queued jobs and waits for the running one to
  // release its stages. Later submissions are refused.
  void Stop();

  // `owner`: the submitting user, recorded with the job ("" when the
  // coordinator has no users).
  absl::StatusOr<petra::v1::Job> Submit(const petra::v1::JobSpec& spec,
                                        const std::string& owner = "");
  absl::StatusOr<petra::v1::Job> Get(const std::string& id);
  // `caller` is whose jobs request.mine() lists.
  absl::StatusOr<petra::v1::ListJobsResponse> List(
      const petra::v1::ListJobsRequest& request,
      const std::string& caller = "");
  absl::StatusOr<petra::v1::Job> Cancel(const std::string& id);
  absl::Status Watch(const std::string& id, std::shared_ptr<JobWatcher> w);
  // The export file of a job that has a checkpoint.
  // The path of the job's newest export in `format` (the TorchScript one is
  // made, and kept, the first time it is asked for after a checkpoint).
  absl::StatusOr<std::string> ExportFile(
      const std::string& id,
      petra::v1::ExportJobRequest::Format format =
          petra::v1::ExportJobRequest::FORMAT_UNSPECIFIED);
  // The fleet (--stages and registered servers), each server asked for its
  // status: blocks for the status call's short deadline at most.
  petra::v1::ListServersResponse ListServers();

 private:
  absl::StatusOr<petra::v1::Job> Queue(const petra::v1::JobSpec& spec,
                                       const std::string& owner);
  // Jobs by state, to the metrics.
  void Count();
  void RunQueue();
  void LoadRecords();
  std::shared_ptr<JobRecord> Find(const std::string& id);

  const RunnerEnvironment env_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<JobRecord>> jobs_;
  std::vector<std::string> order_;  // submission order
  std::deque<std::string> queue_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread runner_;
};

}  // namespace petra::coordinator

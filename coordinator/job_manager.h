// The coordinator's jobs: accepts them (validated, with an id), queues them,
// starts each on a thread of its own when the free stage servers fit it
// (jobs run at once on disjoint servers: server_claims.h), and answers for
// them (get, list, cancel, watch, export). The queue: an interrupted job
// first, then by priority (JobSpec.priority, higher first), in submission
// order within one; the next job waits for servers, and nothing behind it
// passes it, except past jobs whose owner is at a per-user limit. Records
// are kept under --state-dir/jobs/<id>/ and read back at start.
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
#include "coordinator/server_claims.h"

namespace petra::coordinator {

// Per user (a job's owner), what may run at once; 0: no limit.
struct UserLimits {
  int running_jobs = 0;
  int servers = 0;
};

class JobManager {
 public:
  explicit JobManager(RunnerEnvironment env, UserLimits limits = {});
  ~JobManager();
  // Stops the running jobs (each lets go of its stages and stays
  // resumable) and waits for them; queued jobs stay queued. Later
  // submissions are refused.
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
  // The scheduler thread: starts what can start whenever a job is queued
  // or ends, and every second (servers join and leave).
  void Schedule();
  // Under mu_: starts the queued jobs that can start now, and takes those
  // cancelled while queued out of the queue (into `cancelled`, for the
  // caller to mark outside mu_).
  void StartNext(std::vector<std::shared_ptr<JobRecord>>* cancelled);
  void LoadRecords();
  std::shared_ptr<JobRecord> Find(const std::string& id);

  ServerClaims claims_;  // before env_, which points at it
  const RunnerEnvironment env_;
  const UserLimits limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<JobRecord>> jobs_;
  std::vector<std::string> order_;  // submission order
  // Queued jobs, interrupted ones first, then in submission order.
  std::deque<std::string> queue_;
  std::map<std::string, std::thread> running_;  // by job id
  std::vector<std::string> ended_;  // running jobs whose thread is done
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread scheduler_;
};

}  // namespace petra::coordinator

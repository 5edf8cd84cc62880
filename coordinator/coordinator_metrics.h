// The coordinator's Prometheus metrics, all in this one place: the running
// job's identity (petra_job_info: its name, architecture and mode), loss,
// accuracy, epoch, step and learning rate, training samples completed,
// recoveries and checkpoint failures, jobs by state, RPC errors by code, and
// the data feed: what it waits for, and what it holds ready.
// The job gauges carry the job's id: the label stays bounded because a
// job's series are removed when it ends (the jobs running at once are at
// most the fleet's servers). Without a registry every call does nothing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "petra/v1/coordinator.pb.h"

namespace prometheus {
class Registry;
}

namespace petra::coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry* registry);
  ~CoordinatorMetrics();

  // A job starts running (or resumes): its petra_job_info series.
  void JobStarted(const std::string& job_id, const petra::v1::JobSpec& spec);
  void Progress(const std::string& job_id, const petra::v1::Progress& p);
  // The stage servers the job holds, once placed (again after a recovery).
  void JobServers(const std::string& job_id, int servers);
  // The job ended (or its coordinator stops): its series go away.
  void JobEnded(const std::string& job_id);
  // A checkpoint of a running job could not be written.
  void CheckpointFailed();
  // Training samples whose loss came back from the last stage, and a
  // language model's tokens among them (0 for other networks).
  void TrainSamples(int64_t samples, int64_t tokens = 0);
  void JobStates(const std::vector<petra::v1::JobState>& states);
  void Error(absl::StatusCode code);
  // A running job began recovering (a stage server lost, or taken over
  // from a coordinator that stopped).
  void Recovery();
  // The feed sent a micro-batch to stage 0: how long it waited for the
  // batch's data and then for credits, and the batches decoded ahead.
  void Fed(double data_wait_seconds, double credit_wait_seconds, int64_t ready);

 private:
  struct Families;
  struct JobSeries;
  std::unique_ptr<Families> f_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<JobSeries>> jobs_;  // by job id
};

}  // namespace petra::coordinator

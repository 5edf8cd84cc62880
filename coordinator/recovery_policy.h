// When a running job that lost a stage server recovers instead of failing,
// and how a recovery is recorded: RECOVERING with the reason, then the epoch
// it restored and how long it took (the job record, the log, the metric).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_record.h"

namespace petra::coordinator {

class RecoveryPolicy {
 public:
  // `timeout`: how long a recovery waits for servers (0: never recover).
  // `max_in_a_row`: recoveries without a finished epoch before giving up,
  // so a stage that crashes on every start cannot loop forever.
  RecoveryPolicy(std::chrono::seconds timeout, uint32_t max_in_a_row)
      : timeout_(timeout), max_in_a_row_(max_in_a_row) {}

  // How long to wait for enough free servers: none on a first start (a
  // misnamed fleet fails at once), the timeout when recovering.
  std::chrono::seconds wait(bool recovering) const {
    return recovering ? timeout_ : std::chrono::seconds(0);
  }
  // After `failure` ended an attempt: OK when the job recovers, else the
  // status that ends it. Only a job that ran and lost a stage server
  // (`lost_a_stage`, asked only then) recovers, and only so many times in
  // a row.
  absl::Status Decide(const absl::Status& failure, bool ran,
                      const std::function<bool()>& lost_a_stage);
  // An epoch finished: the count in a row starts again.
  void EpochFinished() { in_a_row_ = 0; }

  // Records the start of a recovery: the job turns RECOVERING saying why.
  void Begin(JobRecord& record, CoordinatorMetrics* metrics,
             const std::string& job_id, const absl::Status& cause);
  // Records its end: the epoch restored and the time it took.
  void End(JobRecord& record, const std::string& job_id,
           uint32_t restored_epoch);

 private:
  const std::chrono::seconds timeout_;
  const uint32_t max_in_a_row_;
  uint32_t in_a_row_ = 0;
  std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
};

}  // namespace petra::coordinator

#include "coordinator/recovery_policy.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/base/event_log.h"

namespace petra::coordinator {

absl::Status RecoveryPolicy::Decide(const absl::Status& failure, bool ran,
                                    const std::function<bool()>& lost_a_stage) {
  if (failure.ok()) return failure;
  if (!ran || timeout_.count() == 0 || !lost_a_stage()) return failure;
  if (++in_a_row_ > max_in_a_row_) {
    return absl::Status(
        failure.code(),
        absl::StrCat("gave up after ", max_in_a_row_,
                     " recoveries in a row without finishing an epoch "
                     "(--max-recoveries): ",
                     failure.message()));
  }
  return absl::OkStatus();
}

void RecoveryPolicy::Begin(JobRecord& record, CoordinatorMetrics* metrics,
                           const std::string& job_id,
                           const absl::Status& cause) {
  started_ = std::chrono::steady_clock::now();
  PETRA_LOG_EVENT(kWarning, "recovery_begin", {"job_id", job_id},
                  {"detail", absl::StrCat("lost a stage server (",
                                          cause.message(), "); recovering")});
  if (metrics != nullptr) metrics->Recovery();
  record.Update(petra::v1::JobEvent::KIND_STATE, [&](petra::v1::Job& job) {
    MarkRecovering(job, std::string(cause.message()));
  });
}

void RecoveryPolicy::End(JobRecord& record, const std::string& job_id,
                         uint32_t restored_epoch) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_)
          .count();
  PETRA_LOG_EVENT(
      kInfo, "recovery_end", {"job_id", job_id},
      {"seconds", absl::StrFormat("%.1f", seconds)},
      {"restored_epoch", absl::StrCat(restored_epoch)},
      {"detail", absl::StrCat("recovered in ", absl::StrFormat("%.1f", seconds),
                              " s from epoch ", restored_epoch)});
  record.Update(petra::v1::JobEvent::KIND_STATE, [&](petra::v1::Job& job) {
    if (job.recoveries_size() > 0) {
      petra::v1::Recovery* r =
          job.mutable_recoveries(job.recoveries_size() - 1);
      r->set_restored_epoch(restored_epoch);
      r->set_seconds(seconds);
    }
  });
}

}  // namespace petra::coordinator

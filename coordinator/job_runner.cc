#include "coordinator/job_runner.h"

#include <google/protobuf/util/time_util.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/fleet_runner.h"
#include "coordinator/recovery_policy.h"
#include "services/base/event_log.h"
#include "services/base/timestamp.h"
#include "services/job/enum_names.h"
#include "services/wire/status_map.h"

namespace petra::coordinator {

using petra::v1::Job;
using petra::v1::JobEvent;

void RunJob(JobRecord& record, const RunnerEnvironment& env) {
  record.Update(JobEvent::KIND_STATE, [](Job& job) {
    if (job.state() != petra::v1::JOB_STATE_RECOVERING) {
      job.set_state(petra::v1::JOB_STATE_STARTING);
    }
  });
  const Job started = record.Snapshot();
  if (env.metrics != nullptr)
    env.metrics->JobStarted(started.id(), started.spec());
  PETRA_LOG_EVENT(
      kInfo, "job_started", {"job_id", started.id()},
      {"name", started.spec().name()},
      {"architecture",
       job::EnumShortName(started.spec().model().architecture())},
      {"mode", job::EnumShortName(started.spec().training().mode())},
      {"epochs", absl::StrCat(started.spec().training().epochs())});
  FleetRunner runner(record, env);
  absl::Status status = runner.Run();
  runner.ReleaseAll();
  // Its job gauges end with it (a coordinator restarting it starts them
  // again).
  if (env.metrics != nullptr) env.metrics->JobEnded(started.id());
  if (!status.ok() && record.stop_requested() && !record.cancel_requested()) {
    PETRA_LOG_EVENT(kInfo, "job_suspended", {"job_id", started.id()},
                    {"reason",
                     "the coordinator is stopping; a coordinator on "
                     "the same --state-dir resumes it"});
    // Not an end: the next coordinator on this --state-dir resumes it.
    record.Update(JobEvent::KIND_STATE, [&](Job& job) {
      MarkRecovering(job,
                     "the coordinator stopped while the job was running; it "
                     "resumes when a coordinator starts again on the same "
                     "--state-dir");
    });
    return;
  }
  record.Update(JobEvent::KIND_STATE, [&](Job& job) {
    *job.mutable_end_time() = base::NowTimestamp();
    if (status.ok()) {
      job.set_state(petra::v1::JOB_STATE_SUCCEEDED);
    } else if (record.cancel_requested()) {
      job.set_state(petra::v1::JOB_STATE_CANCELLED);
    } else {
      job.set_state(petra::v1::JOB_STATE_FAILED);
      *job.mutable_error() = wire::ToProtoStatus(status);
    }
  });
  const Job ended = record.Snapshot();
  PETRA_LOG_EVENT_IF(
      status.ok() || record.cancel_requested() ? base::LogLevel::kInfo
                                               : base::LogLevel::kError,
      "job_end", {"job_id", ended.id()},
      {"state", std::string(absl::AsciiStrToLower(
                    petra::v1::JobState_Name(ended.state()).substr(10)))},
      {"epoch", absl::StrCat(ended.progress().epoch())},
      {"steps", absl::StrCat(ended.progress().step())},
      {"reason", status.ok()                 ? "finished"
                 : record.cancel_requested() ? "cancelled"
                                             : std::string(status.message())});
}

void RunJobCatching(JobRecord& record, const RunnerEnvironment& env) {
  std::string what;
  try {
    RunJob(record, env);
    return;
  } catch (const std::exception& e) {
    what = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  const std::string id = record.Snapshot().id();
  PETRA_LOG_EVENT(kError, "job_end", {"job_id", id}, {"state", "failed"},
                  {"reason", absl::StrCat("internal error: ", what)});
  record.Update(JobEvent::KIND_STATE, [&](Job& job) {
    *job.mutable_end_time() = base::NowTimestamp();
    job.set_state(petra::v1::JOB_STATE_FAILED);
    *job.mutable_error() = wire::ToProtoStatus(absl::InternalError(
        absl::StrCat("the coordinator hit an internal error running this "
                     "job (a bug; please report it): ",
                     what)));
  });
}

}  // namespace petra::coordinator

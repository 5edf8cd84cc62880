#include "coordinator/job_record.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include <iostream>

#include "services/base/durable_file.h"
#include "services/base/event_log.h"
#include "services/base/proto_json.h"
#include "services/base/timestamp.h"

namespace petra::coordinator {

bool IsTerminal(petra::v1::JobState s) {
  return s == petra::v1::JOB_STATE_SUCCEEDED ||
         s == petra::v1::JOB_STATE_FAILED ||
         s == petra::v1::JOB_STATE_CANCELLED;
}

void MarkRecovering(petra::v1::Job& job, const std::string& reason) {
  job.set_state(petra::v1::JOB_STATE_RECOVERING);
  petra::v1::Recovery* r = job.add_recoveries();
  *r->mutable_time() = base::NowTimestamp();
  r->set_reason(reason);
}

JobRecord::JobRecord(petra::v1::Job job, std::string record_path,
                     std::function<void()> on_change)
    : job_(std::move(job)),
      record_path_(std::move(record_path)),
      on_change_(std::move(on_change)) {
  Save(job_, ++version_);
}

petra::v1::Job JobRecord::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return job_;
}

void JobRecord::Update(petra::v1::JobEvent::Kind kind,
                       const std::function<void(petra::v1::Job&)>& change) {
  const bool save = kind != petra::v1::JobEvent::KIND_PROGRESS;
  petra::v1::Job saved;
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (IsTerminal(job_.state())) return;  // nothing follows the end
    change(job_);
    if (save) {
      saved = job_;
      version = ++version_;
    }
    petra::v1::JobEvent event;
    event.set_kind(kind);
    *event.mutable_time() = base::NowTimestamp();
    *event.mutable_job() = job_;
    const bool last = IsTerminal(job_.state());
    for (auto& w : watchers_) w->OnEvent(event, last);
    if (last) watchers_.clear();
  }
  // Written outside the lock: readers of the job (status calls on gRPC
  // threads) never wait for the disk.
  if (save) Save(saved, version);
  if (save && on_change_) on_change_();
}

void JobRecord::Subscribe(std::shared_ptr<JobWatcher> watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  petra::v1::JobEvent event;
  event.set_kind(petra::v1::JobEvent::KIND_STATE);
  *event.mutable_time() = base::NowTimestamp();
  *event.mutable_job() = job_;
  const bool last = IsTerminal(job_.state());
  watcher->OnEvent(event, last);
  if (!last) watchers_.push_back(std::move(watcher));
}

void JobRecord::Save(const petra::v1::Job& job, uint64_t version) {
  if (record_path_.empty()) return;
  std::lock_guard<std::mutex> lock(save_mu_);
  // Two changes may race here: the newer one on disk wins.
  if (version <= saved_version_) return;
  // snake_case, as `petra status --json` prints the same Job (records
  // written camelCase by earlier versions still load: the parser takes
  // both).
  const std::string json = base::ProtoToJson(job);
  // A reader, or the next coordinator, never sees half a record. A record
  // that cannot be saved is said, not ignored: the job itself goes on (it
  // lives in memory, and its checkpoints are apart).
  if (absl::Status s = base::WriteFileAtomically(record_path_, json); !s.ok()) {
    PETRA_LOG_EVENT(kError, "job_record_not_saved", {"job_id", job.id()},
                    {"reason", std::string(s.message())});
    return;
  }
  saved_version_ = version;
}

}  // namespace petra::coordinator

// One job as the coordinator knows it: the Job message, guarded, saved to
// --state-dir on every change of substance, and streamed to its watchers as
// JobEvents. The runner changes it only through Update.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "petra/v1/coordinator.pb.h"

namespace petra::coordinator {

// Receives a job's events. `last` is set on the event that ends the job;
// nothing follows it.
class JobWatcher {
 public:
  virtual ~JobWatcher() = default;
  virtual void OnEvent(const petra::v1::JobEvent& event, bool last) = 0;
};

bool IsTerminal(petra::v1::JobState state);

// Turns `job` RECOVERING and appends a Recovery entry stamped now, saying
// why; EndRecovery fills in its epoch and duration.
void MarkRecovering(petra::v1::Job& job, const std::string& reason);

class JobRecord {
 public:
  // `record_path`: where the record is saved as JSON ("" = not saved).
  // `on_change` runs after every change but progress, outside the lock.
  JobRecord(petra::v1::Job job, std::string record_path,
            std::function<void()> on_change = nullptr);

  petra::v1::Job Snapshot() const;
  // Applies `change` under the lock, saves the record (except for progress
  // events) and sends the event to every watcher.
  void Update(petra::v1::JobEvent::Kind kind,
              const std::function<void(petra::v1::Job&)>& change);
  // Sends the current state at once (as KIND_STATE), then every event.
  void Subscribe(std::shared_ptr<JobWatcher> watcher);

  void RequestCancel() { cancel_requested_ = true; }
  bool cancel_requested() const { return cancel_requested_; }
  // The coordinator is stopping: the runner lets go of the job without
  // ending it, so the next coordinator on the same --state-dir resumes it.
  void RequestStop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }

 private:
  // Writes `job`, change number `version`, unless a newer one is written.
  void Save(const petra::v1::Job& job, uint64_t version);

  mutable std::mutex mu_;
  petra::v1::Job job_;
  const std::string record_path_;
  const std::function<void()> on_change_;
  std::vector<std::shared_ptr<JobWatcher>> watchers_;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> stop_requested_{false};
  uint64_t version_ = 0;  // changes saved so far; guarded by mu_
  std::mutex save_mu_;
  uint64_t saved_version_ = 0;  // guarded by save_mu_
};

}  // namespace petra::coordinator

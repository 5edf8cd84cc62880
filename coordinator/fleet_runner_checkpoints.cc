// FleetRunner's checkpoints: writing one after an epoch, and finding and
// loading the newest usable one when a job starts, resumes or recovers.
#include <google/protobuf/util/time_util.h>

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/fleet_runner.h"
#include "coordinator/train_log.h"
#include "services/base/event_log.h"
#include "services/base/timestamp.h"

namespace petra::coordinator {
namespace {

// Checkpoints moved between the stages and the coordinator's disk at once:
// each costs the coordinator a thread and a few pieces in memory, so that a
// fleet of hundreds of stages costs what four do.
constexpr int kTransfersAtOnce = 4;

}  // namespace

using petra::v1::Job;
using petra::v1::JobEvent;

absl::StatusOr<engine::TrainingCursor> FleetRunner::Load(
    const ResumePoint& point) {
  // Replica 0's files are every replica's: each copy of stage j restores
  // the same file. A few stages at once; then their answers in order.
  const int stages = this->stages();
  const int servers = stages * replicas_;
  std::vector<petra::v1::RestoreCheckpointResponse> responses(servers);
  absl::Status pushed = StageFleet::ForEach(
      servers,
      [&](int k) {
        absl::StatusOr<petra::v1::RestoreCheckpointResponse> response =
            pipelines_[k / stages].fleet->PushCheckpoint(
                k % stages, point.files[k % stages]);
        if (!response.ok()) return response.status();
        responses[k] = std::move(*response);
        return absl::OkStatus();
      },
      kTransfersAtOnce);
  if (!pushed.ok()) return pushed;
  std::optional<uint64_t> steps, samples;
  for (int k = 0; k < servers; ++k) {
    const petra::v1::RestoreCheckpointResponse* response = &responses[k];
    if (!response->restored() || response->epoch() != point.epoch ||
        (steps && (*steps != response->optimizer_steps() ||
                   *samples != response->samples_seen()))) {
      return absl::DataLossError(absl::StrCat(
          point.directory, ": stage ", k % stages,
          replicas_ > 1 ? absl::StrCat(" of replica ", k / stages) : "",
          "'s checkpoint disagrees with the others (epoch ", response->epoch(),
          ", ", response->optimizer_steps(), " optimizer steps)"));
    }
    steps = response->optimizer_steps();
    samples = response->samples_seen();
  }
  PETRA_LOG_EVENT(
      kInfo, "job_resumed", {"job_id", id_},
      {"epoch", absl::StrCat(point.epoch)}, {"steps", absl::StrCat(*steps)},
      {"detail", absl::StrCat("resumed from ", point.directory, " (epoch ",
                              point.epoch, ", ", *steps, " optimizer steps)")});
  return engine::TrainingCursor{point.epoch + 1, *steps, *samples};
}

absl::StatusOr<engine::TrainingCursor> FleetRunner::RestoreNewest() {
  const TrainLog log(layout().train_log());
  auto trim = [&](uint32_t epochs) {
    if (absl::Status s = log.Trim(epochs); !s.ok()) {
      PETRA_LOG_EVENT(kWarning, "train_log_not_trimmed", {"job_id", id_},
                      {"reason", std::string(s.message())});
    }
  };
  // The job's own checkpoints first: it is recovering, or its coordinator
  // restarted.
  absl::StatusOr<ResumePoint> own =
      FindResumePoint(env_.state_dir, id_, stages());
  if (own.ok()) {
    for (const std::string& why : own->skipped) {
      PETRA_LOG_EVENT(
          kWarning, "checkpoint_skipped", {"job_id", id_},
          {"detail", absl::StrCat("passed over a checkpoint: ", why)});
    }
    absl::StatusOr<engine::TrainingCursor> cursor = Load(*own);
    if (cursor.ok()) trim(own->epoch);
    return cursor;
  }
  if (!absl::EndsWith(own.status().message(), "(none written)")) {
    PETRA_LOG_EVENT(kWarning, "no_usable_checkpoint", {"job_id", id_},
                    {"reason", std::string(own.status().message())});
  }
  const std::string& from = spec_.checkpoint().resume_from_job();
  if (from.empty()) {
    // No checkpoint yet: start again from the seeded initial weights, which
    // every stage rebuilt when it was assigned.
    trim(0);
    return engine::TrainingCursor();
  }
  absl::StatusOr<ResumePoint> point =
      FindResumePoint(env_.state_dir, from, stages());
  if (!point.ok()) return Prefixed("resuming: ", point.status());
  for (const std::string& why : point->skipped) {
    PETRA_LOG_EVENT(kWarning, "checkpoint_skipped", {"job_id", id_},
                    {"detail", absl::StrCat("passed over a checkpoint of ",
                                            from, ": ", why)});
  }
  if (point->epoch >= spec_.training().epochs()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resuming: the newest usable checkpoint of job \"", from,
        "\" is after epoch ", point->epoch, " and this job trains ",
        spec_.training().epochs(),
        " epochs: nothing is left to train (ask for more epochs)"));
  }
  absl::StatusOr<engine::TrainingCursor> cursor = Load(*point);
  if (!cursor.ok()) return Prefixed("resuming: ", cursor.status());
  trim(0);
  return cursor;
}

absl::StatusOr<engine::TrainingCursor> FleetRunner::Restore() {
  absl::StatusOr<engine::TrainingCursor> cursor = RestoreNewest();
  if (!cursor.ok()) return cursor.status();
  steps_done_ = cursor->steps;
  if (recovering_) recovery_.End(record_, id_, cursor->next_epoch - 1);
  record_.Update(JobEvent::KIND_STATE, [](Job& job) {
    job.set_state(petra::v1::JOB_STATE_RUNNING);
    if (!job.has_start_time()) {
      *job.mutable_start_time() = base::NowTimestamp();
    }
  });
  if (cursor->next_epoch > 1) {
    // Where the job stands, keeping the training figures it had.
    petra::v1::Progress p;
    p.set_epoch(cursor->next_epoch - 1);
    p.set_step(cursor->steps);
    const Job job = record_.Snapshot();
    if (job.has_progress()) {
      p.set_train_loss(job.progress().train_loss());
      p.set_train_accuracy(job.progress().train_accuracy());
      p.set_samples_per_second(job.progress().samples_per_second());
    }
    Publish(JobEvent::KIND_PROGRESS, std::move(p));
  }
  return cursor;
}
absl::Status FleetRunner::Checkpoint(const engine::TrainingCursor& cursor) {
  const uint32_t epoch = cursor.next_epoch - 1;
  // Every stage writes its file at once; then a few at a time send theirs,
  // each piece straight to the coordinator's disk: its memory holds
  // pieces, never a file. Replica 0's: the replicas hold the same weights,
  // and BN statistics averaged at the end of the pass
  // (StageWorker::SettleReplicas).
  StageFleet& fleet = *pipelines_[0].fleet;
  CheckpointStore store(layout());
  std::vector<petra::v1::CheckpointResponse> files(fleet.size());
  std::vector<std::string> sha256s(fleet.size());
  auto failed = [&](int j, const absl::Status& s) {
    PETRA_LOG_EVENT(kError, "checkpoint_failed", {"job_id", id_},
                    {"stage", absl::StrCat(j)},
                    {"reason", std::string(s.message())});
    return s;
  };
  absl::Status pulled = StageFleet::ForEach(fleet.size(), [&](int j) {
    petra::v1::CheckpointRequest request;
    request.set_job_id(id_);
    request.set_name(JobLayout::CheckpointName(epoch));
    request.set_step(cursor.steps);
    request.set_epoch(epoch);
    request.set_samples_seen(cursor.samples_seen);
    absl::StatusOr<petra::v1::CheckpointResponse> file =
        fleet.WriteCheckpoint(j, request);
    if (!file.ok()) return failed(j, file.status());
    files[j] = std::move(*file);
    return absl::OkStatus();
  });
  if (pulled.ok()) {
    pulled = StageFleet::ForEach(
        fleet.size(),
        [&](int j) {
          absl::StatusOr<std::string> sha256 =
              fleet.PullCheckpoint(j, files[j], store.Incoming(epoch, j));
          if (!sha256.ok()) return failed(j, sha256.status());
          sha256s[j] = std::move(*sha256);
          return absl::OkStatus();
        },
        kTransfersAtOnce);
  }
  if (!pulled.ok()) {
    store.Discard(epoch);
    if (env_.metrics != nullptr) env_.metrics->CheckpointFailed();
    return Prefixed("checkpoint: ", pulled);
  }
  const uint32_t keep =
      spec_.checkpoint().has_keep_last() ? spec_.checkpoint().keep_last() : 2;
  absl::StatusOr<std::string> written =
      store.Commit(epoch, sha256s, keep, preprocessing_);
  if (!written.ok()) {
    store.Discard(epoch);
    if (env_.metrics != nullptr) env_.metrics->CheckpointFailed();
    PETRA_LOG_EVENT(kError, "checkpoint_failed", {"job_id", id_},
                    {"reason", std::string(written.status().message())});
    return Prefixed("checkpoint: ", written.status());
  }
  record_.Update(JobEvent::KIND_CHECKPOINT,
                 [&](Job& job) { job.set_last_checkpoint(*written); });
  PETRA_LOG_EVENT(kInfo, "checkpoint_written", {"job_id", id_},
                  {"epoch", absl::StrCat(epoch)}, {"path", *written});
  return absl::OkStatus();
}

}  // namespace petra::coordinator

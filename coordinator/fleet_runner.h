// The fleet adapter of the job driver (services/engine/job_driver.h), for
// one job: it loads the data and plans the partition, picks and assigns the
// stage servers (fleet_control.h), runs each pass (pass_feed.h), keeps the
// loss log (train_log.h) and the checkpoints (checkpoint_store.h), publishes
// progress on the job record and recovers a job that lost a stage server
// (recovery_policy.h). Used by RunJob (job_runner.h) only; its checkpoint
// and restore half is in fleet_runner_checkpoints.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/checkpoint_store.h"
#include "coordinator/fleet_control.h"
#include "coordinator/job_layout.h"
#include "coordinator/job_record.h"
#include "coordinator/pass_feed.h"
#include "coordinator/recovery_policy.h"
#include "coordinator/runner_environment.h"
#include "coordinator/stage_placement.h"
#include "services/data/dataset.h"
#include "services/engine/epoch_progress.h"
#include "services/engine/job_driver.h"
#include "services/model/partition.h"

namespace petra::coordinator {

class FleetRunner final : public engine::PassExecutor,
                          public engine::JobObserver {
 public:
  FleetRunner(JobRecord& record, const RunnerEnvironment& env);

  absl::Status Run();
  // Every replica's stage servers at once: a stage waiting for its copy
  // in another replica is freed when that copy is released.
  void ReleaseAll();

  // engine::PassExecutor.
  absl::StatusOr<engine::TrainingCursor> Restore() override;
  absl::StatusOr<engine::PassResult> RunPass(
      petra::v1::Phase phase, const engine::PassBatches& batches) override;
  absl::Status Checkpoint(const engine::TrainingCursor& cursor) override;
  std::vector<petra::v1::StageStats> StageStats() override {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stage_stats_;
  }
  // engine::JobObserver.
  absl::Status OnTrainPass(uint32_t epoch, uint64_t steps_before,
                           const engine::PassResult& train) override;
  void OnEpoch(const engine::EpochReport& report) override;

 private:
  JobLayout layout() const { return JobLayout(env_.state_dir, id_); }
  absl::Status Interrupted() const;
  absl::Status Prepare();
  // Picks the job's servers and assigns them: of those that answer and are
  // free (the job's own first, after a loss, then the others of --stages in
  // order), the placement planner's choice by memory and host. Waits up to
  // `wait` for enough of them.
  absl::Status Attach(std::chrono::seconds wait);
  // Keeps the servers of `probe` that stage_placement chooses, in stage
  // order, and its cut while the job has not placed stages yet.
  absl::Status Place(ProbeResult& probe);
  absl::Status Assign();
  // The Assign of stage j of replica r (the replica group's place in it
  // when the job has replicas).
  absl::StatusOr<petra::v1::AssignRequest> AssignRequestOf(int r, int j);
  // Each link's data channel from the job's `transport` and the ends'
  // LinkEndpoint (services/link/transport_choice.h), in every replica.
  absl::Status ChooseTransports();
  // A training pass with replicas: each replica's pipeline fed its dealt
  // share of `batches` at once, the results merged under the pass's ids.
  absl::StatusOr<engine::PassResult> RunReplicatedPass(
      petra::v1::Phase phase, const engine::PassBatches& batches,
      const PassWatch& watch, const FeedOptions& feed);
  // The newest usable checkpoint in every stage: the job's own, else that
  // of checkpoint.resume_from_job, else none (the seeded initial weights).
  absl::StatusOr<engine::TrainingCursor> RestoreNewest();
  absl::StatusOr<engine::TrainingCursor> Load(const ResumePoint& point);
  // Polls replica r's stages (every replica's when r < 0) into
  // stage_stats_; `busy` as StageFleet::Poll's.
  absl::Status PollStages(int r = -1, bool* busy = nullptr);
  // After a replicated pass: waits until every replica's stages have
  // settled (StageWorker::SettleReplicas; a weight mismatch fails the
  // pass here), then keeps their final statistics.
  absl::Status AwaitSettled();
  // Publishes progress: `p` holds the epoch, step and training figures; the
  // rest (totals, time, ETA, rate, test figures, stages) is added here.
  void Publish(petra::v1::JobEvent::Kind kind, petra::v1::Progress p);
  double ElapsedSeconds() const;

  JobRecord& record_;
  const RunnerEnvironment& env_;
  const StageConnector connect_;
  std::string id_;
  petra::v1::JobSpec spec_;
  data::Splits data_;
  petra::v1::Preprocessing preprocessing_;  // what data_ gives the model
  int64_t steps_per_epoch_ = 0;
  // Built once, when the epoch's steps are known.
  std::optional<engine::ProgressBuilder> progress_;
  std::vector<model::BlockRange> ranges_;
  JobBlocks blocks_;
  // Set once stages hold the cut (placed, or recorded before a restart):
  // their checkpoints are of these ranges, so a recovery keeps them.
  bool ranges_fixed_ = false;
  // One copy of the job's pipeline: its J stage servers, and the data
  // channel of each link j <-> j+1 and of the feed's two streams, as
  // ChooseTransports decided at the last Assign.
  struct Pipeline {
    std::unique_ptr<StageFleet> fleet;
    std::vector<petra::v1::Transport> links;
    petra::v1::Transport feed_to_first = petra::v1::TRANSPORT_GRPC;
    petra::v1::Transport feed_to_last = petra::v1::TRANSPORT_GRPC;
  };
  int stages() const { return static_cast<int>(ranges_.size()); }
  // JobSpec.replicas: R pipelines of J stages (one without replicas).
  int replicas_ = 1;
  // Empty until attached. Replica 0's evaluates and writes checkpoints.
  std::vector<Pipeline> pipelines_;
  // Assigns so far: each names its replica groups apart.
  int assigns_ = 0;
  // Every replica's stages, replica 0's first (guarded by stats_mu_: the
  // replicas' feeds poll their own).
  std::mutex stats_mu_;
  std::vector<petra::v1::StageStats> stage_stats_;
  RecoveryPolicy recovery_;
  bool recovering_ = false;
  uint64_t steps_done_ = 0;  // before the current pass
  std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
  std::optional<std::pair<double, double>> last_test_;
};

}  // namespace petra::coordinator

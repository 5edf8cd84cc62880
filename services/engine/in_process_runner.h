// Trains a whole job in one process: J stage workers on J threads joined by
// bounded queues, each following its stage's schedule; with R replicas
// (JobSpec.replicas), R such pipelines, each fed every R-th micro-batch,
// whose stages average their gradients in a c10d group per stage
// (replica_group.h) and settle at the end of each training pass
// (StageWorker::SettleReplicas), as a fleet's do. Evaluation, the gradient
// check, reports and the export are replica 0's. The in-process adapter of the
// job driver's PassExecutor port (job_driver.h): the epoch loop is the
// driver's, shared with the gRPC fleet. The reference the fleet is checked
// against.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/data/dataset.h"
#include "services/engine/job_driver.h"
#include "services/engine/replica_group.h"
#include "services/engine/serial_executor.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker.h"
#include "services/model/partition.h"

namespace petra::engine {

struct StepReport {
  int64_t micro_batch = 0;  // within the epoch
  double loss = 0;
  uint32_t epoch = 0;
};

struct RunnerOptions {
  // Intra-op threads per stage; 0 = cores / stages (at least 1).
  int threads_per_stage = 0;
  // Called on the runner's thread after each epoch.
  std::function<void(const EpochReport&)> on_epoch;
  // Called from the last stage's thread for every training micro-batch.
  std::function<void(const StepReport&)> on_step;
};

class InProcessRunner : public PassExecutor, public JobObserver {
 public:
  // `resolved` from job::ResolveJobSpec; `data` already loaded.
  static absl::StatusOr<std::unique_ptr<InProcessRunner>> Create(
      const petra::v1::JobSpec& resolved, data::Splits data,
      RunnerOptions options);
  ~InProcessRunner() override;

  // Trains every epoch (or until max_steps) and evaluates as the spec says.
  absl::StatusOr<std::vector<EpochReport>> Run();

  const std::vector<model::BlockRange>& partition() const { return ranges_; }
  StageWorker& worker(int i) { return *workers_[i]; }
  // Stage `stage` of replica `replica` (0: worker(stage)).
  StageWorker& worker(int replica, int stage);
  int stage_count() const { return static_cast<int>(workers_.size()); }
  int replicas() const { return 1 + static_cast<int>(copies_.size()); }
  // Every stage's report now (memory peaks by kind included).
  std::vector<StageReport> Reports() const;

  // The export of the weights now: what the fleet's coordinator writes as a
  // job's model.pt (state_file.h, MergeForExport), the same bytes format.
  absl::StatusOr<std::string> ExportFile();

  // Epoch `epoch` (its evaluation too, when due), for tests and benchmarks
  // that inspect between epochs.
  absl::StatusOr<EpochReport> RunEpoch(int epoch);
  // Mean loss and accuracy of the current weights on `split`.
  absl::StatusOr<std::pair<double, double>> Evaluate(
      const data::Dataset& split);

  // PassExecutor. A run goes on from where the workers are (the seeded
  // initial weights at first); the in-process runner keeps no checkpoints.
  absl::StatusOr<TrainingCursor> Restore() override;
  absl::StatusOr<PassResult> RunPass(petra::v1::Phase phase,
                                     const PassBatches& batches) override;
  absl::Status Checkpoint(const TrainingCursor&) override {
    return absl::OkStatus();
  }
  std::vector<petra::v1::StageStats> StageStats() override;
  // JobObserver.
  void OnEpoch(const EpochReport& report) override;

 private:
  InProcessRunner() = default;

  petra::v1::JobSpec spec_;
  data::Splits data_;
  RunnerOptions options_;
  std::vector<model::BlockRange> ranges_;
  std::vector<std::unique_ptr<StageWorker>> workers_;
  // Replicas 1..R-1, each its J workers.
  std::vector<std::vector<std::unique_ptr<StageWorker>>> copies_;
  // Per stage, its R ranks' averagers.
  std::vector<std::vector<std::unique_ptr<GradientAverager>>> groups_;
  std::unique_ptr<JobDriver> driver_;
  // One thread per (replica, stage) for the runner's life, as a stage server
  // keeps its own: a thread per pass gave each stage another malloc arena
  // every pass, and the second epoch took up to ten times the page faults
  // of the first. Declared last: joined before the workers go.
  std::vector<std::unique_ptr<SerialExecutor>> stage_threads_;
};

}  // namespace petra::engine

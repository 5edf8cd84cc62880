// Trains a whole job in one process: J stage workers on J threads joined by
// bounded queues, following the pipeline schedule (PETRA / delayed) or
// micro-batch after micro-batch (backprop, no overlap). The reference the
// gRPC fleet is checked against.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/data/dataset.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker.h"
#include "services/model/partition.h"

namespace petra::engine {

struct EpochReport {
  int epoch = 0;  // 1-based
  double train_loss = 0;
  // Running accuracy during the epoch, or with evaluation.full_train_pass
  // the accuracy of the epoch's final weights on the whole training split.
  double train_accuracy = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double samples_per_second = 0;
  double train_seconds = 0;
  double learning_rate = 0;
  std::vector<StageReport> stages;
};

struct StepReport {
  int64_t micro_batch = 0;  // within the epoch
  double loss = 0;
};

struct RunnerOptions {
  // Intra-op threads per stage; 0 = cores / stages (at least 1).
  int threads_per_stage = 0;
  // Called on the runner's thread after each epoch.
  std::function<void(const EpochReport&)> on_epoch;
  // Called from the last stage's thread for every training micro-batch.
  std::function<void(const StepReport&)> on_step;
};

class InProcessRunner {
 public:
  // `resolved` from job::ResolveJobSpec; `data` already loaded.
  static absl::StatusOr<std::unique_ptr<InProcessRunner>> Create(
      const petra::v1::JobSpec& resolved, data::Splits data,
      RunnerOptions options);
  ~InProcessRunner();

  // Trains every epoch (or until max_steps) and evaluates as the spec says.
  absl::StatusOr<std::vector<EpochReport>> Run();

  const std::vector<model::BlockRange>& partition() const { return ranges_; }
  StageWorker& worker(int i) { return *workers_[i]; }
  int stage_count() const { return static_cast<int>(workers_.size()); }

  // One training epoch and one evaluation, for tests that inspect between.
  absl::StatusOr<EpochReport> RunEpoch(int epoch);
  absl::StatusOr<std::pair<double, double>> Evaluate(
      const data::Dataset& split);

 private:
  InProcessRunner() = default;
  std::vector<StageReport> Reports() const;

  petra::v1::JobSpec spec_;
  data::Splits data_;
  RunnerOptions options_;
  std::vector<model::BlockRange> ranges_;
  std::vector<std::unique_ptr<StageWorker>> workers_;
  int64_t steps_per_epoch_ = 0;
};

}  // namespace petra::engine

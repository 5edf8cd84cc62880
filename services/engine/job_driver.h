// The epoch loop of a job, one for every runner: how many micro-batches each
// epoch trains, when to evaluate and checkpoint, step and sample accounting,
// the epoch's loss and accuracy, and when max_steps ends training early. It
// talks to a PassExecutor port; the in-process runner (threads and queues)
// and the coordinator's fleet runner (stage servers over gRPC) are the two
// adapters, so both report the same epochs for the same job.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/common.pb.h"
#include "petra/v1/job.pb.h"
#include "petra/v1/stage.pb.h"  // Phase
#include "services/data/batches.h"
#include "services/engine/pass_batches.h"
#include "services/engine/pass_result.h"

namespace petra::engine {

// Where training stands between epochs: what a checkpoint records and a
// resume starts from.
struct TrainingCursor {
  uint32_t next_epoch = 1;    // the first epoch still to train (1-based)
  uint64_t steps = 0;         // optimizer steps taken
  uint64_t samples_seen = 0;  // training samples fed (the data cursor)
};

struct EpochReport {
  uint32_t epoch = 0;  // 1-based
  uint64_t steps = 0;  // optimizer steps after the epoch
  // An evaluation inside the epoch (evaluation.every_steps), `steps` in:
  // the training figures are the epoch's so far.
  bool mid_epoch = false;
  double train_loss = 0;
  // Running accuracy during the epoch, or with evaluation.full_train_pass
  // the accuracy of the epoch's final weights on the whole training split.
  double train_accuracy = 0;
  // This epoch's evaluation gave the test figures; otherwise they are the
  // last ones there were (0 before any).
  bool evaluated = false;
  bool tested = false;  // this or an earlier epoch's evaluation gave figures
  double test_loss = 0;
  double test_accuracy = 0;
  double samples_per_second = 0;
  double train_seconds = 0;
  double learning_rate = 0;
  int64_t skipped_micro_batches = 0;  // non-finite losses (skip policy)
  // Image-folder files that did not decode, replaced (skip policy), so far.
  int64_t corrupt_images_skipped = 0;
  std::vector<petra::v1::StageStats> stages;
};

// What a runner does for the driver.
class PassExecutor {
 public:
  virtual ~PassExecutor() = default;
  // Where the job starts: the beginning, or its newest usable checkpoint
  // restored into every stage.
  virtual absl::StatusOr<TrainingCursor> Restore() = 0;
  // Runs the micro-batches of `batches` (ids 0..size()-1; a training pass
  // may span several epochs without draining between them) through every
  // stage as a training or evaluation pass, and tallies the last stage's
  // reports under their pass ids (PassResult::Record, training kept).
  virtual absl::StatusOr<PassResult> RunPass(petra::v1::Phase phase,
                                             const PassBatches& batches) = 0;
  // Saves every stage's state at `cursor` (after epoch next_epoch - 1).
  virtual absl::Status Checkpoint(const TrainingCursor& cursor) = 0;
  // Every stage's statistics now.
  virtual std::vector<petra::v1::StageStats> StageStats() = 0;
};

// Hears about each epoch as it ends.
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  // The training pass of `epoch` is over; `steps_before` were taken before
  // it. An error ends the job (the fleet writes its loss log here).
  virtual absl::Status OnTrainPass(uint32_t /*epoch*/,
                                   uint64_t /*steps_before*/,
                                   const PassResult& /*train*/) {
    return absl::OkStatus();
  }
  // The epoch is over: trained, evaluated if due; before its checkpoint.
  // Also each evaluation inside an epoch (report.mid_epoch).
  virtual void OnEpoch(const EpochReport& /*report*/) {}
};

class JobDriver {
 public:
  // `resolved`: from job::ResolveJobSpec. `data`, `executor` and `observer`
  // (may be null) outlive the driver.
  JobDriver(const petra::v1::JobSpec& resolved, const data::Splits& data,
            int64_t steps_per_epoch, PassExecutor& executor,
            JobObserver* observer);

  // Restores, then trains every epoch left (or until max_steps), evaluating
  // and checkpointing as the spec says. The pipeline stays full across the
  // epochs between two that evaluate or checkpoint (one pass for them all),
  // and drains only where an evaluation or checkpoint needs consistent
  // weights, or training ends. Returns the epochs' ends (the observer
  // hears of the evaluations inside epochs too).
  absl::StatusOr<std::vector<EpochReport>> Run();
  // One epoch from the current cursor, drained at its end (tests and
  // benchmarks); FAILED_PRECONDITION when it has no whole optimizer step.
  absl::StatusOr<EpochReport> RunEpoch();
  // The mean loss and accuracy of the current weights on `split`.
  absl::StatusOr<PassResult> Evaluate(const data::Dataset& split,
                                      uint32_t epoch);

  const TrainingCursor& cursor() const { return cursor_; }
  // Starts the epoch next_epoch from its beginning.
  void set_cursor(const TrainingCursor& cursor);
  // Whether training is over: every epoch trained, or max_steps reached.
  bool done() const;

 private:
  // Whether the pipeline drains after `epoch`, `steps` steps in.
  bool DrainsAfter(uint32_t epoch, uint64_t steps) const;
  // Whether evaluation.every_steps asks for an evaluation `steps` in.
  bool StepEvaluationDue(uint64_t steps) const;
  // Trains up to `max_epochs` epochs from the cursor in one pass (fewer
  // where one must drain, or part of one up to an evaluation inside it);
  // their reports, none when nothing was left.
  absl::StatusOr<std::vector<EpochReport>> RunSegment(uint32_t max_epochs);
  // One epoch's bookkeeping after its pass; `drained`: the pass ended with
  // it, so it may evaluate and checkpoint.
  absl::StatusOr<EpochReport> FinishEpoch(const PassBatches::Part& part,
                                          const PassResult& train,
                                          bool drained);
  // The pass stopped inside `part`'s epoch for an evaluation.
  absl::StatusOr<EpochReport> FinishMidEpoch(const PassBatches::Part& part,
                                             const PassResult& train);
  // The figures and learning rate every report has, from the epoch's
  // training so far.
  EpochReport ReportOf(uint32_t epoch, const PassResult& train) const;
  // Evaluates on the test split into `report` (and the last figures).
  absl::Status EvaluateInto(uint32_t epoch, EpochReport& report);
  // Completes `report` (the last test figures, the stages) and tells the
  // observer.
  void Publish(EpochReport& report);

  const petra::v1::JobSpec spec_;
  const data::Splits& data_;
  const int64_t steps_per_epoch_;
  PassExecutor& executor_;
  JobObserver* observer_;
  TrainingCursor cursor_;
  // Where an evaluation inside epoch cursor_.next_epoch stopped its
  // training: its micro-batches trained so far, and what they did.
  int64_t epoch_offset_ = 0;
  PassResult epoch_so_far_;
  std::optional<std::pair<double, double>> last_test_;  // loss, accuracy
};

}  // namespace petra::engine

#include "services/engine/job_driver.h"

#include <algorithm>

#include "services/data/image_folder.h"
#include "services/engine/job_plan.h"
#include "services/engine/lr_schedule.h"

namespace petra::engine {

JobDriver::JobDriver(const petra::v1::JobSpec& resolved,
                     const data::Splits& data, int64_t steps_per_epoch,
                     PassExecutor& executor, JobObserver* observer)
    : spec_(resolved),
      data_(data),
      steps_per_epoch_(steps_per_epoch),
      executor_(executor),
      observer_(observer) {}

bool JobDriver::done() const {
  const uint64_t max_steps = spec_.training().max_steps();
  return cursor_.next_epoch > spec_.training().epochs() ||
         (max_steps > 0 && cursor_.steps >= max_steps);
}

absl::StatusOr<PassResult> JobDriver::Evaluate(const data::Dataset& split,
                                               uint32_t epoch) {
  data::EpochBatches batches(split, EvalBatchOptions(spec_), 0);
  if (batches.size() == 0) return PassResult();
  return executor_.RunPass(petra::v1::PHASE_EVAL, epoch, batches,
                           batches.size());
}

absl::StatusOr<EpochReport> JobDriver::RunEpoch() {
  const uint32_t e = cursor_.next_epoch;
  data::EpochBatches batches(data_.train, TrainBatchOptions(spec_), e - 1);
  const int64_t n = TrainMicroBatches(spec_, batches.size(),
                                      static_cast<int64_t>(cursor_.steps));
  absl::StatusOr<PassResult> train =
      executor_.RunPass(petra::v1::PHASE_TRAIN, e, batches, n);
  if (!train.ok()) return train.status();
  const uint64_t steps_before = cursor_.steps;
  if (observer_ != nullptr) {
    if (absl::Status s = observer_->OnTrainPass(e, steps_before, *train);
        !s.ok()) {
      return s;
    }
  }
  cursor_.steps += n / spec_.training().accumulation_steps();
  cursor_.samples_seen += train->fed_samples;
  cursor_.next_epoch = e + 1;

  EpochReport report;
  report.epoch = e;
  report.steps = cursor_.steps;
  report.train_loss = train->mean_loss();
  report.train_accuracy = train->accuracy();
  report.samples_per_second = train->samples_per_second();
  report.train_seconds = train->seconds;
  report.skipped_micro_batches = train->skipped;
  for (const data::Dataset* split : {&data_.train, &data_.test}) {
    if (split->source != nullptr) {
      report.corrupt_images_skipped += split->source->corrupt_skipped();
    }
  }
  report.learning_rate =
      LrSchedule(spec_, steps_per_epoch_)
          .At(std::max<int64_t>(0, static_cast<int64_t>(cursor_.steps) - 1));
  // The last epoch is evaluated whatever ends it: the epoch count or
  // max_steps.
  const uint32_t every = spec_.evaluation().every_epochs();
  if (e % every == 0 || done()) {
    absl::StatusOr<PassResult> test = Evaluate(data_.test, e);
    if (!test.ok()) return test.status();
    // An evaluation with no finite loss (a diverged model under the skip
    // policy) has no figures to give: the last ones stand.
    if (test->samples > 0) {
      last_test_ = {test->mean_loss(), test->accuracy()};
      report.evaluated = true;
    }
    if (spec_.evaluation().full_train_pass()) {
      // Accuracy of the trained weights on the whole training split, in
      // place of the running accuracy gathered while the weights moved.
      absl::StatusOr<PassResult> whole = Evaluate(data_.train, e);
      if (!whole.ok()) return whole.status();
      if (whole->samples > 0) report.train_accuracy = whole->accuracy();
    }
  }
  if (last_test_) {
    report.test_loss = last_test_->first;
    report.test_accuracy = last_test_->second;
  }
  report.stages = executor_.StageStats();
  if (observer_ != nullptr) observer_->OnEpoch(report);
  const uint32_t checkpoint_every = spec_.checkpoint().every_epochs();
  if ((checkpoint_every > 0 && e % checkpoint_every == 0) || done()) {
    if (absl::Status s = executor_.Checkpoint(cursor_); !s.ok()) return s;
  }
  return report;
}

absl::StatusOr<std::vector<EpochReport>> JobDriver::Run() {
  absl::StatusOr<TrainingCursor> start = executor_.Restore();
  if (!start.ok()) return start.status();
  cursor_ = *start;
  std::vector<EpochReport> reports;
  while (!done()) {
    // An epoch with no whole optimizer step left to train ends the job.
    data::EpochBatches batches(data_.train, TrainBatchOptions(spec_),
                               cursor_.next_epoch - 1);
    if (TrainMicroBatches(spec_, batches.size(),
                          static_cast<int64_t>(cursor_.steps)) == 0) {
      break;
    }
    absl::StatusOr<EpochReport> r = RunEpoch();
    if (!r.ok()) return r.status();
    reports.push_back(std::move(*r));
  }
  return reports;
}

}  // namespace petra::engine

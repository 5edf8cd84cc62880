#include "services/engine/job_driver.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
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
  return executor_.RunPass(petra::v1::PHASE_EVAL,
                           PassBatches(epoch, batches, batches.size()));
}

bool JobDriver::DrainsAfter(uint32_t epoch, uint64_t steps) const {
  const uint32_t eval_every = spec_.evaluation().every_epochs();
  const uint32_t checkpoint_every = spec_.checkpoint().every_epochs();
  const uint64_t max_steps = spec_.training().max_steps();
  return epoch % eval_every == 0 ||
         (checkpoint_every > 0 && epoch % checkpoint_every == 0) ||
         epoch >= spec_.training().epochs() ||
         (max_steps > 0 && steps >= max_steps);
}

absl::StatusOr<EpochReport> JobDriver::RunEpoch() {
  absl::StatusOr<std::vector<EpochReport>> r = RunSegment(1);
  if (!r.ok()) return r.status();
  if (r->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("epoch ", cursor_.next_epoch,
                     " has no whole optimizer step left to train"));
  }
  return std::move(r->front());
}

absl::StatusOr<std::vector<EpochReport>> JobDriver::RunSegment(
    uint32_t max_epochs) {
  // The epochs one pass trains: up to the next one that needs consistent
  // weights (an evaluation or a checkpoint) or ends training.
  const uint64_t k = MicroBatchesPerStep(spec_);
  std::vector<std::unique_ptr<data::EpochBatches>> owned;
  std::vector<PassBatches::Part> parts;
  uint64_t steps = cursor_.steps;
  for (uint32_t e = cursor_.next_epoch;
       e <= spec_.training().epochs() && parts.size() < max_epochs; ++e) {
    auto batches = std::make_unique<data::EpochBatches>(
        data_.train, TrainBatchOptions(spec_), e - 1);
    const int64_t n =
        TrainMicroBatches(spec_, batches->size(), static_cast<int64_t>(steps));
    if (n == 0) break;  // no whole optimizer step left
    parts.push_back({e, batches.get(), n});
    owned.push_back(std::move(batches));
    steps += n / k;
    if (DrainsAfter(e, steps)) break;
  }
  std::vector<EpochReport> reports;
  if (parts.empty()) return reports;
  const PassBatches pass(parts);
  absl::StatusOr<PassResult> whole =
      executor_.RunPass(petra::v1::PHASE_TRAIN, pass);
  if (!whole.ok()) return whole.status();
  // The end-to-end gradient check of the pass's sampled micro-batches, at
  // the weights the stages kept for them.
  if (const int64_t every = spec_.training().end_to_end_every(); every > 0) {
    // Replica 0's micro-batches (it runs the check), the last of every
    // `every` of its steps: those its stages kept weights for.
    const PassBatches check =
        pass.Dealt(0, std::max<int>(1, spec_.replicas()))
            .Strided(every * spec_.training().accumulation_steps());
    if (check.size() > 0) {
      absl::StatusOr<PassResult> r =
          executor_.RunPass(petra::v1::PHASE_GRADIENT_CHECK, check);
      if (!r.ok()) return r.status();
    }
  }
  const std::vector<PassResult> epochs = SplitIntoEpochs(*whole, pass);
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    absl::StatusOr<EpochReport> r = FinishEpoch(parts[i], epochs[i], last);
    if (!r.ok()) return r.status();
    reports.push_back(std::move(*r));
  }
  return reports;
}

absl::StatusOr<EpochReport> JobDriver::FinishEpoch(
    const PassBatches::Part& part, const PassResult& train, bool drained) {
  const uint32_t e = part.epoch;
  const uint64_t steps_before = cursor_.steps;
  if (observer_ != nullptr) {
    if (absl::Status s = observer_->OnTrainPass(e, steps_before, train);
        !s.ok()) {
      return s;
    }
  }
  cursor_.steps += part.n / MicroBatchesPerStep(spec_);
  cursor_.samples_seen += train.fed_samples;
  cursor_.next_epoch = e + 1;

  EpochReport report;
  report.epoch = e;
  report.steps = cursor_.steps;
  report.train_loss = train.mean_loss();
  report.train_accuracy = train.accuracy();
  report.samples_per_second = train.samples_per_second();
  report.train_seconds = train.seconds;
  report.skipped_micro_batches = train.skipped;
  for (const data::Dataset* split : {&data_.train, &data_.test}) {
    if (split->source != nullptr) {
      report.corrupt_images_skipped += split->source->corrupt_skipped();
    }
  }
  report.learning_rate =
      LrSchedule(spec_, steps_per_epoch_)
          .At(std::max<int64_t>(0, static_cast<int64_t>(cursor_.steps) - 1));
  // Only where the pipeline drained: an evaluation when due, and the last
  // epoch's whatever ends it (the epoch count or max_steps).
  const uint32_t every = spec_.evaluation().every_epochs();
  if (drained && (e % every == 0 || done())) {
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
    report.tested = true;
    report.test_loss = last_test_->first;
    report.test_accuracy = last_test_->second;
  }
  report.stages = executor_.StageStats();
  if (observer_ != nullptr) observer_->OnEpoch(report);
  const uint32_t checkpoint_every = spec_.checkpoint().every_epochs();
  if (drained &&
      ((checkpoint_every > 0 && e % checkpoint_every == 0) || done())) {
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
    absl::StatusOr<std::vector<EpochReport>> segment =
        RunSegment(std::numeric_limits<uint32_t>::max());
    if (!segment.ok()) return segment.status();
    // An epoch with no whole optimizer step left to train ends the job.
    if (segment->empty()) break;
    for (EpochReport& r : *segment) reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace petra::engine

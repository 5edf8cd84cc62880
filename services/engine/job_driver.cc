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

void JobDriver::set_cursor(const TrainingCursor& cursor) {
  cursor_ = cursor;
  epoch_offset_ = 0;
  epoch_so_far_ = PassResult();
}

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
  return epoch % eval_every == 0 || StepEvaluationDue(steps) ||
         (checkpoint_every > 0 && epoch % checkpoint_every == 0) ||
         epoch >= spec_.training().epochs() ||
         (max_steps > 0 && steps >= max_steps);
}

bool JobDriver::StepEvaluationDue(uint64_t steps) const {
  const uint64_t every = spec_.evaluation().every_steps();
  return every > 0 && steps > 0 && steps % every == 0;
}

absl::StatusOr<EpochReport> JobDriver::RunEpoch() {
  const uint32_t epoch = cursor_.next_epoch;
  while (true) {
    absl::StatusOr<std::vector<EpochReport>> r = RunSegment(1);
    if (!r.ok()) return r.status();
    if (r->empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch ", epoch, " has no whole optimizer step left to train"));
    }
    // Evaluations inside the epoch come first.
    if (!r->front().mid_epoch) return std::move(r->front());
  }
}

absl::StatusOr<std::vector<EpochReport>> JobDriver::RunSegment(
    uint32_t max_epochs) {
  // The epochs one pass trains: up to the next one that needs consistent
  // weights (an evaluation or a checkpoint) or ends training.
  const int64_t k = MicroBatchesPerStep(spec_);
  const uint64_t every_steps = spec_.evaluation().every_steps();
  std::vector<std::unique_ptr<data::EpochBatches>> owned;
  std::vector<PassBatches::Part> parts;
  uint64_t steps = cursor_.steps;
  bool mid_epoch = false;  // the pass stops inside its last epoch
  for (uint32_t e = cursor_.next_epoch;
       e <= spec_.training().epochs() && parts.size() < max_epochs; ++e) {
    auto batches = std::make_unique<data::EpochBatches>(
        data_.train, TrainBatchOptions(spec_), e - 1);
    // An epoch an evaluation stopped part-way resumes where it stopped.
    const int64_t first = e == cursor_.next_epoch ? epoch_offset_ : 0;
    const int64_t before = static_cast<int64_t>(steps) - first / k;
    int64_t n = TrainMicroBatches(spec_, batches->size(), before) - first;
    if (n <= 0) break;  // no whole optimizer step left
    if (every_steps > 0) {
      const uint64_t next = (steps / every_steps + 1) * every_steps;
      const int64_t to_next = static_cast<int64_t>(next - steps) * k;
      if (to_next < n) {
        n = to_next;
        mid_epoch = true;
      }
    }
    parts.push_back({e, batches.get(), n, first});
    owned.push_back(std::move(batches));
    steps += static_cast<uint64_t>(n / k);
    if (mid_epoch || DrainsAfter(e, steps)) break;
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
    absl::StatusOr<EpochReport> r =
        last && mid_epoch ? FinishMidEpoch(parts[i], epochs[i])
                          : FinishEpoch(parts[i], epochs[i], last);
    if (!r.ok()) return r.status();
    reports.push_back(std::move(*r));
  }
  return reports;
}

EpochReport JobDriver::ReportOf(uint32_t epoch, const PassResult& train) const {
  EpochReport report;
  report.epoch = epoch;
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
  return report;
}

absl::Status JobDriver::EvaluateInto(uint32_t epoch, EpochReport& report) {
  absl::StatusOr<PassResult> test = Evaluate(data_.test, epoch);
  if (!test.ok()) return test.status();
  // An evaluation with no finite loss (a diverged model under the skip
  // policy) has no figures to give: the last ones stand.
  if (test->samples > 0) {
    last_test_ = {test->mean_loss(), test->accuracy()};
    report.evaluated = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<EpochReport> JobDriver::FinishMidEpoch(
    const PassBatches::Part& part, const PassResult& train) {
  if (part.first == 0) {
    epoch_so_far_ = train;
  } else {
    epoch_so_far_.Continue(train);
  }
  epoch_offset_ = part.first + part.n;
  cursor_.steps += part.n / MicroBatchesPerStep(spec_);
  EpochReport report = ReportOf(part.epoch, epoch_so_far_);
  report.mid_epoch = true;
  if (absl::Status s = EvaluateInto(part.epoch, report); !s.ok()) return s;
  Publish(report);
  return report;
}

void JobDriver::Publish(EpochReport& report) {
  if (last_test_) {
    report.tested = true;
    report.test_loss = last_test_->first;
    report.test_accuracy = last_test_->second;
  }
  report.stages = executor_.StageStats();
  if (observer_ != nullptr) observer_->OnEpoch(report);
}

absl::StatusOr<EpochReport> JobDriver::FinishEpoch(
    const PassBatches::Part& part, const PassResult& pass, bool drained) {
  const uint32_t e = part.epoch;
  const int64_t k = MicroBatchesPerStep(spec_);
  // The whole epoch's training, with what its passes before this one did
  // (stopped for evaluations inside it).
  PassResult train;
  if (part.first > 0) {
    train = std::move(epoch_so_far_);
    train.Continue(pass);
  } else {
    train = pass;
  }
  epoch_so_far_ = PassResult();
  epoch_offset_ = 0;
  const uint64_t steps_before =
      cursor_.steps - static_cast<uint64_t>(part.first / k);
  if (observer_ != nullptr) {
    if (absl::Status s = observer_->OnTrainPass(e, steps_before, train);
        !s.ok()) {
      return s;
    }
  }
  cursor_.steps += static_cast<uint64_t>(part.n / k);
  cursor_.samples_seen += train.fed_samples;
  cursor_.next_epoch = e + 1;

  EpochReport report = ReportOf(e, train);
  // Only where the pipeline drained: an evaluation when due, and the last
  // epoch's whatever ends it (the epoch count or max_steps).
  const uint32_t every = spec_.evaluation().every_epochs();
  if (drained &&
      (e % every == 0 || StepEvaluationDue(cursor_.steps) || done())) {
    if (absl::Status s = EvaluateInto(e, report); !s.ok()) return s;
    if (spec_.evaluation().full_train_pass()) {
      // Accuracy of the trained weights on the whole training split, in
      // place of the running accuracy gathered while the weights moved.
      absl::StatusOr<PassResult> whole = Evaluate(data_.train, e);
      if (!whole.ok()) return whole.status();
      if (whole->samples > 0) report.train_accuracy = whole->accuracy();
    }
  }
  Publish(report);
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
  set_cursor(*start);
  std::vector<EpochReport> reports;
  while (!done()) {
    absl::StatusOr<std::vector<EpochReport>> segment =
        RunSegment(std::numeric_limits<uint32_t>::max());
    if (!segment.ok()) return segment.status();
    // An epoch with no whole optimizer step left to train ends the job.
    if (segment->empty()) break;
    for (EpochReport& r : *segment) {
      if (!r.mid_epoch) reports.push_back(std::move(r));
    }
  }
  return reports;
}

}  // namespace petra::engine

#include "services/engine/epoch_progress.h"

#include <algorithm>
#include <cmath>

#include "services/engine/lr_schedule.h"

namespace petra::engine {

ProgressBuilder::ProgressBuilder(const petra::v1::JobSpec& resolved,
                                 int64_t steps_per_epoch,
                                 double valid_bytes_per_token)
    : spec_(resolved),
      steps_per_epoch_(steps_per_epoch),
      valid_bytes_per_token_(valid_bytes_per_token) {
  total_steps_ = steps_per_epoch * resolved.training().epochs();
  if (resolved.training().max_steps() > 0) {
    total_steps_ = std::min<int64_t>(
        total_steps_, static_cast<int64_t>(resolved.training().max_steps()));
  }
}

petra::v1::Progress ProgressBuilder::AfterEpoch(const EpochReport& report,
                                                double elapsed_seconds) const {
  petra::v1::Progress p;
  p.set_epoch(report.epoch);
  p.set_step(report.steps);
  p.set_mid_epoch(report.mid_epoch);
  p.set_train_loss(report.train_loss);
  p.set_train_accuracy(report.train_accuracy);
  p.set_samples_per_second(report.samples_per_second);
  if (report.tested) {
    p.set_test_loss(report.test_loss);
    p.set_test_accuracy(report.test_accuracy);
  }
  p.set_corrupt_images_skipped(
      static_cast<uint64_t>(report.corrupt_images_skipped));
  for (const petra::v1::StageStats& s : report.stages) *p.add_stages() = s;
  Complete(elapsed_seconds, &p);
  return p;
}

void ProgressBuilder::Complete(double elapsed_seconds,
                               petra::v1::Progress* p) const {
  p->set_total_epochs(spec_.training().epochs());
  p->set_total_steps(static_cast<uint64_t>(total_steps_));
  p->set_elapsed_seconds(elapsed_seconds);
  const int64_t step = static_cast<int64_t>(p->step());
  if (step > 0 && total_steps_ > 0) {
    p->set_eta_seconds(elapsed_seconds / step * (total_steps_ - step));
  }
  p->set_learning_rate(
      LrSchedule(spec_, steps_per_epoch_).At(std::max<int64_t>(0, step - 1)));
  if (p->has_test_loss() && valid_bytes_per_token_ > 0) {
    p->set_test_bits_per_byte(p->test_loss() / std::log(2.0) /
                              valid_bytes_per_token_);
  }
}

}  // namespace petra::engine

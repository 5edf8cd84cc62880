#include "services/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace petra::engine {

LrSchedule::LrSchedule(const petra::v1::JobSpec& s, int64_t steps_per_epoch)
    : peak_(s.optimizer().learning_rate()),
      steps_per_epoch_(std::max<int64_t>(1, steps_per_epoch)),
      decay_(s.schedule().decay()),
      step_epochs_(s.schedule().step_epochs().begin(),
                   s.schedule().step_epochs().end()),
      step_factor_(s.schedule().step_factor()),
      delay_power_(s.schedule().delay_lr_power()),
      delay_anneal_steps_(std::llround(s.schedule().delay_lr_anneal_epochs() *
                                       steps_per_epoch_)) {
  warmup_steps_ = std::llround(s.schedule().warmup_epochs() * steps_per_epoch_);
  total_steps_ = steps_per_epoch_ * s.training().epochs();
  if (s.training().max_steps() > 0) {
    total_steps_ = std::min<int64_t>(total_steps_, s.training().max_steps());
  }
}

LrSchedule LrSchedule::ForDelay(double delay_steps) const {
  LrSchedule delayed = *this;
  delayed.delay_steps_ = delay_steps;
  return delayed;
}

double LrSchedule::DelayFactor(int64_t step) const {
  if (delay_power_ <= 0 || delay_steps_ <= 0) return 1.0;
  double power = delay_power_;
  if (delay_anneal_steps_ > 0) {
    power *= std::max(0.0, 1.0 - static_cast<double>(step) /
                                     static_cast<double>(delay_anneal_steps_));
  }
  return std::pow(1.0 + delay_steps_, -power);
}

double LrSchedule::At(int64_t step) const {
  return DelayFactor(step) * SharedAt(step);
}

double LrSchedule::SharedAt(int64_t step) const {
  if (step < warmup_steps_) {
    // Linear from 0: the first step already moves, the last reaches the peak.
    return peak_ * static_cast<double>(step + 1) / warmup_steps_;
  }
  switch (decay_) {
    case petra::v1::ScheduleSpec::DECAY_STEP: {
      const int64_t epoch = step / steps_per_epoch_;
      double lr = peak_;
      for (uint32_t e : step_epochs_) {
        if (epoch >= e) lr *= step_factor_;
      }
      return lr;
    }
    case petra::v1::ScheduleSpec::DECAY_COSINE: {
      const int64_t span = std::max<int64_t>(1, total_steps_ - warmup_steps_);
      const double t =
          std::min(1.0, static_cast<double>(step - warmup_steps_) / span);
      return peak_ * 0.5 * (1.0 + std::cos(M_PI * t));
    }
    default:
      return peak_;
  }
}

}  // namespace petra::engine

// Learning rate per optimizer step: linear warm-up from 0, then constant,
// step or cosine decay.
#pragma once

#include <cstdint>
#include <vector>

#include "petra/v1/job.pb.h"

namespace petra::engine {

class LrSchedule {
 public:
  // `steps_per_epoch` optimizer steps make one epoch.
  LrSchedule(const petra::v1::JobSpec& resolved, int64_t steps_per_epoch);
  // Rate for the optimizer step `step` (0-based).
  double At(int64_t step) const;
  // The same schedule for a stage whose gradients arrive `delay_steps`
  // optimizer steps late: schedule.delay_lr_power's scaling (training.proto).
  LrSchedule ForDelay(double delay_steps) const;
  int64_t total_steps() const { return total_steps_; }

 private:
  // Every stage's rate at `step`: warm-up, then the decay.
  double SharedAt(int64_t step) const;
  // At(step)'s factor for this stage's delay (1 without one).
  double DelayFactor(int64_t step) const;

  double peak_;
  int64_t warmup_steps_;
  int64_t total_steps_;
  int64_t steps_per_epoch_;
  petra::v1::ScheduleSpec::Decay decay_;
  std::vector<uint32_t> step_epochs_;
  double step_factor_;
  double delay_power_ = 0;
  int64_t delay_anneal_steps_ = 0;
  double delay_steps_ = 0;
};

}  // namespace petra::engine

#include "services/schedule/training_mode.h"

#include <algorithm>

namespace petra::schedule {

ModePlan PlanMode(const petra::v1::TrainingSpec& t) {
  ModePlan m;
  m.schedule = ScheduleForMode(t.mode());
  const bool pipeline = t.mode() == petra::v1::TRAINING_MODE_PIPELINE;
  if (pipeline) {
    m.schedule = t.pipeline_schedule() ==
                         petra::v1::TrainingSpec::PIPELINE_SCHEDULE_GPIPE
                     ? ScheduleKind::kGpipe
                     : ScheduleKind::kOneFOneB;
    m.group = std::max<int64_t>(1, t.accumulation_steps());
    m.store_activations = !t.recompute();
  }
  // Forward gradients (forward_gradient_stage.h).
  const bool forward_gradient =
      t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT;
  m.traffic = {forward_gradient, forward_gradient, forward_gradient};
  m.delayed_gradients =
      t.mode() != petra::v1::TRAINING_MODE_BACKPROP && !pipeline;
  const bool delayed = t.mode() == petra::v1::TRAINING_MODE_DELAYED;
  m.stash_inputs = delayed && t.stash_inputs();
  m.stash_weights = delayed && t.stash_weights();
  m.rebuild_with_current =
      m.stash_weights &&
      t.rebuild_with() == petra::v1::TrainingSpec::REBUILD_WITH_CURRENT;
  m.keeps_directions = forward_gradient;
  return m;
}

}  // namespace petra::schedule

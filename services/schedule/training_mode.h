// What a training mode means for the stages, decided in one place from the
// resolved spec: the schedule the stages run, what a stage keeps between a
// micro-batch's forward and its backward, and what travels beside the
// activations. The parts that act by mode (the stage worker, the stage
// loop, the plan, the memory estimate, the stage server's mailbox, the
// coordinator's feed) read this, never training.mode itself.
#pragma once

#include <algorithm>
#include <cstdint>

#include "petra/v1/job.pb.h"
#include "services/schedule/pipeline_schedule.h"

namespace petra::schedule {

// What travels between the stages beside the activations and gradients.
struct ModeTraffic {
  // The labels go up with the activations to every stage (each has a local
  // loss), not only from the coordinator to the last stage.
  bool labels_with_activations = false;
  // The activations carry tangents, one per stage below.
  bool tangents = false;
  // Directional derivatives come down instead of tensors: a stage updates
  // from them and runs no backward through itself.
  bool derivatives_down = false;
};

struct ModePlan {
  ScheduleKind schedule = ScheduleKind::kPetra;
  // Micro-batches a flushing schedule (gpipe, 1f1b) runs between steps: the
  // accumulation, so that every flush is one optimizer step; 1 otherwise.
  int64_t group = 1;
  ModeTraffic traffic;
  // Gradients apply after later forwards (every mode but backprop): the
  // staleness bound and the in-flight depth follow.
  bool delayed_gradients = true;
  // Delayed mode's buffers: every stage keeps its inputs, its weights.
  bool stash_inputs = false;
  // Pipeline mode without recompute: each forward's graph (its
  // activations) is kept until the backward.
  bool store_activations = false;
  bool stash_weights = false;
  // With stash_weights: rebuild with the current weights (Table 4 row 4).
  bool rebuild_with_current = false;
  // A stage keeps the tangent directions of its micro-batches in flight,
  // which the memory accounts count as its weight stash.
  bool keeps_directions = false;

  // Micro-batches stage `stage` of `stages` holds between a forward and its
  // backward at most, its own included: 1 in backprop; the flush's M in
  // gpipe (1 on the last stage), min(J - j, M) in 1f1b.
  int64_t in_flight(int stage, int stages) const {
    switch (schedule) {
      case ScheduleKind::kGpipe:
        return stage == stages - 1 ? 1 : group;
      case ScheduleKind::kOneFOneB:
        return std::min<int64_t>(stages - stage, group);
      default:
        return delayed_gradients ? 2 * (stages - 1 - stage) + 1 : 1;
    }
  }
};

ModePlan PlanMode(const petra::v1::TrainingSpec& resolved);

}  // namespace petra::schedule

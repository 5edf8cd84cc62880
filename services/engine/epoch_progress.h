// A job's progress as clients see it (petra.v1.Progress), built in one
// place for both runners: the fleet's coordinator publishes it, `petra
// train --runner in-process` prints and reports it, and the two agree.
#pragma once

#include <cstdint>

#include "petra/v1/coordinator.pb.h"
#include "petra/v1/job.pb.h"
#include "services/engine/job_driver.h"

namespace petra::engine {

class ProgressBuilder {
 public:
  // `valid_bytes_per_token`: a language model's validation text (bytes over
  // tokens), for bits per byte; 0 for images.
  ProgressBuilder(const petra::v1::JobSpec& resolved, int64_t steps_per_epoch,
                  double valid_bytes_per_token = 0);

  // The figures of an epoch that ended (test figures: the last evaluation's,
  // unset before any).
  petra::v1::Progress AfterEpoch(const EpochReport& report,
                                 double elapsed_seconds) const;

  // What every Progress carries besides its figures: the totals, the time
  // so far and to go, the learning rate of the last step taken (p->step())
  // and, for a language model with a test loss, its bits per byte.
  void Complete(double elapsed_seconds, petra::v1::Progress* p) const;

  int64_t total_steps() const { return total_steps_; }

 private:
  petra::v1::JobSpec spec_;
  int64_t steps_per_epoch_;
  int64_t total_steps_;
  double valid_bytes_per_token_;
};

}  // namespace petra::engine

// A stage's links to its neighbours for one pass: the Forward stream to the
// next stage, the Backward stream to the previous one (training passes), and
// the outbox the stage loop sends through (encoding on send threads of its
// own, completions on the coordinator's streams). Opened when a pass starts,
// finished when it ends; Cancel aborts them from any thread.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "services/engine/stage_io.h"
#include "services/wire/transport_security.h"
#include "stage_server/stage_job.h"
#include "stage_server/stage_metrics.h"

namespace petra::stage_server {

class NeighborLinks {
 public:
  // `after_each` runs after each micro-batch the stage hands on (its
  // statistics snapshot).
  NeighborLinks(StageJob& job, const PassInfo& pass,
                const wire::TransportSecurity& security, StageMetrics& metrics,
                std::function<void()> after_each);
  ~NeighborLinks();

  engine::StageOutbox& outbox();
  // Not OK when a data channel the job chose could not be made here: the
  // pass must not start.
  absl::Status status() const;
  void Cancel();
  // Ends the pass's sending: waits for what is queued (after cancelling
  // the streams when `status` is already an error), closes the streams and
  // returns the first error, `status` first.
  absl::Status Finish(absl::Status status);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace petra::stage_server

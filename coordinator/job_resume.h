// Resuming a job from another job's checkpoints (checkpoint.resume_from_job):
// which specs may resume which. The checkpoint it resumes from is the
// checkpoint store's (checkpoint_store.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::coordinator {

// OK when `spec` may continue the training of `from`: everything that shapes
// the weights or the data order is the same (model, data, partition,
// training mode, optimizer, schedule kind, seed). Name, epochs, max steps,
// evaluation, checkpoint policy, devices and diagnostics may differ.
// FAILED_PRECONDITION naming the fields that differ otherwise.
absl::Status CheckResumable(const petra::v1::JobSpec& from,
                            const petra::v1::JobSpec& spec);

}  // namespace petra::coordinator

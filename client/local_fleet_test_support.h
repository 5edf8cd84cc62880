// What the LocalFleet tests share: a scratch folder, small jobs, and a job
// run on a fleet of its own on loopback, followed to its end.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/coordinator.pb.h"
#include "petra/v1/job.pb.h"

namespace petra::client {

// A fresh folder under /tmp, removed with everything in it.
struct ScopedDir {
  ScopedDir();
  ~ScopedDir();
  std::string path;
};

// Every job here has synthetic data: the servers' data root only has to
// exist, and the test's own directory serves (GPU hosts have no
// /usr/share/datasets, and the GPU tests must not need it). `steps`
// micro-batches of `micro_batch` on three stages: the first stage's
// gradients arrive 4 ticks late, so a dozen steps already run the pipeline
// full and its delayed updates.
petra::v1::JobSpec SmallJob(petra::v1::TrainingMode mode, uint32_t steps = 24,
                            uint32_t micro_batch = 16);

// The GPU tests' job: fifty steps of 64, a GPU's work worth comparing.
petra::v1::JobSpec FiftySteps(petra::v1::TrainingMode mode);

struct FleetRun {
  absl::StatusOr<petra::v1::Job> job;
  std::vector<petra::v1::Progress> epochs;  // epoch-end progress
};

// Submits `spec` to a fleet of its stage count (times its replicas) on
// loopback and follows it to the end.
FleetRun RunOnFleet(const petra::v1::JobSpec& spec, const std::string& dir);

}  // namespace petra::client

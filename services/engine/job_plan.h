// What every runner of a job computes the same way, so the in-process runner
// and the gRPC fleet train bit-for-bit the same job: the batching of each
// split, steps per epoch, micro-batches of an epoch, and the stage workers
// (seeded initialisation of the whole network, then its slices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/data/batches.h"
#include "services/engine/stage_worker.h"
#include "services/model/partition.h"

namespace petra::engine {

data::BatchOptions TrainBatchOptions(const petra::v1::JobSpec& resolved);
data::BatchOptions EvalBatchOptions(const petra::v1::JobSpec& resolved);

// Micro-batches one optimizer step takes: k of every replica's (every
// replica steps at once), k x replicas.
int64_t MicroBatchesPerStep(const petra::v1::JobSpec& resolved);

// Optimizer steps in one epoch of `train_examples` (each replica's: every
// replica steps at once); INVALID_ARGUMENT when the split holds less than
// one step, or when evaluation.every_steps asks for more evaluations than
// job::kMaxEvaluationsInsideEpochs.
absl::StatusOr<int64_t> StepsPerEpoch(const petra::v1::JobSpec& resolved,
                                      int64_t train_examples);

// Micro-batches to train in an epoch of `available` batches when the stages
// have taken `steps_done` optimizer steps: whole steps of every replica
// only (a multiple of k x replicas), and no more than max_steps allows.
int64_t TrainMicroBatches(const petra::v1::JobSpec& resolved, int64_t available,
                          int64_t steps_done);

// The partition of the job's network into stages (builds the network).
absl::StatusOr<std::vector<model::BlockRange>> PlanStages(
    const petra::v1::JobSpec& resolved);

// Builds the whole network from the job's seed (on the host, so every device
// starts from the same weights) and returns the workers of the stages in
// `which` (every stage when empty), in that order, each on its device: the
// spec's (job::DeviceForStage), or `device` when given (a stage server
// places its stage on its own device).
absl::StatusOr<std::vector<std::unique_ptr<StageWorker>>> BuildStageWorkers(
    const petra::v1::JobSpec& resolved,
    const std::vector<model::BlockRange>& ranges, int64_t steps_per_epoch,
    const std::vector<int>& which = {}, const std::string& device = "");

}  // namespace petra::engine

#include "services/engine/job_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/engine/torch_guard.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/model/partition_plan.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {

data::BatchOptions TrainBatchOptions(const petra::v1::JobSpec& s) {
  data::BatchOptions o;
  o.batch_size = s.training().micro_batch_size();
  o.shuffle = true;
  o.drop_last = true;
  o.crop_padding = s.dataset().augmentation().random_crop_padding();
  o.horizontal_flip = s.dataset().augmentation().horizontal_flip();
  o.normalize = s.dataset().augmentation().normalize();
  o.seed = s.seed();
  o.train_transform = true;
  return o;
}

data::BatchOptions EvalBatchOptions(const petra::v1::JobSpec& s) {
  data::BatchOptions o;
  o.batch_size = s.training().micro_batch_size();
  o.shuffle = false;
  o.drop_last = false;
  o.normalize = s.dataset().augmentation().normalize();
  return o;
}

absl::StatusOr<int64_t> StepsPerEpoch(const petra::v1::JobSpec& s,
                                      int64_t train_examples) {
  const int64_t batch = s.training().micro_batch_size();
  const int64_t micro_batches = train_examples / batch;
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training split has ", train_examples,
                     " examples, fewer than one micro-batch of ", batch));
  }
  // Each of R replicas takes every R-th micro-batch, and steps every k.
  const int64_t replicas = std::max<int64_t>(1, s.replicas());
  const int64_t steps = micro_batches / MicroBatchesPerStep(s);
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "one epoch holds ", micro_batches,
        " micro-batches, fewer than k = ", s.training().accumulation_steps(),
        replicas > 1 ? absl::StrCat(" times ", replicas, " replicas") : ""));
  }
  // Each evaluation inside an epoch stays in the job's record: bounded.
  if (const uint64_t every = s.evaluation().every_steps(); every > 0) {
    uint64_t total = static_cast<uint64_t>(steps) * s.training().epochs();
    if (s.training().max_steps() > 0) {
      total = std::min<uint64_t>(total, s.training().max_steps());
    }
    if (total / every > job::kMaxEvaluationsInsideEpochs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "evaluation.every_steps ", every, " evaluates ", total / every,
          " times in the job's ", total, " steps, more than ",
          job::kMaxEvaluationsInsideEpochs, ": raise it to at least ",
          (total + job::kMaxEvaluationsInsideEpochs - 1) /
              job::kMaxEvaluationsInsideEpochs));
    }
  }
  return steps;
}

int64_t MicroBatchesPerStep(const petra::v1::JobSpec& s) {
  return static_cast<int64_t>(s.training().accumulation_steps()) *
         std::max<int64_t>(1, s.replicas());
}

int64_t TrainMicroBatches(const petra::v1::JobSpec& s, int64_t available,
                          int64_t steps_done) {
  // Whole optimizer steps only, of every replica at once.
  const int64_t k = MicroBatchesPerStep(s);
  int64_t n = available - available % k;
  if (s.training().max_steps() > 0) {
    const int64_t left =
        static_cast<int64_t>(s.training().max_steps()) - steps_done;
    n = std::min(n, std::max<int64_t>(0, left) * k);
  }
  return n;
}

absl::StatusOr<std::vector<model::BlockRange>> PlanStages(
    const petra::v1::JobSpec& s) {
  absl::StatusOr<model::NetworkBlueprint> net =
      model::DescribeNetwork(s.model());
  if (!net.ok()) return net.status();
  return model::PlanPartition(*net, s);
}

absl::StatusOr<std::vector<std::unique_ptr<StageWorker>>> BuildStageWorkers(
    const petra::v1::JobSpec& s, const std::vector<model::BlockRange>& ranges,
    int64_t steps_per_epoch, const std::vector<int>& which,
    const std::string& device) {
  // Only the stages' own blocks are built, each from its own seed
  // (model::BlockSeed): every runner, and every stage server building only
  // its slice, gets the same initial weights.
  absl::StatusOr<model::NetworkBlueprint> net =
      model::DescribeNetwork(s.model());
  if (!net.ok()) return net.status();
  if (absl::Status s = model::CheckCovers(ranges, net->size()); !s.ok()) {
    return s;
  }
  const int stages = static_cast<int>(ranges.size());
  std::vector<int> order = which;
  if (order.empty()) {
    for (int j = 0; j < stages; ++j) order.push_back(j);
  }
  const schedule::ModePlan mode = schedule::PlanMode(s.training());
  std::vector<std::unique_ptr<StageWorker>> out;
  for (int j : order) {
    if (j < 0 || j >= stages) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", j, " is not in [0, ", stages, ")"));
    }
    StageConfig config;
    config.index = j;
    config.count = stages;
    config.first_block = ranges[j].begin;
    config.stash_inputs = mode.stash_inputs;
    config.stash_weights = mode.stash_weights;
    config.store_activations = mode.store_activations;
    config.rebuild_with_current = mode.rebuild_with_current;
    config.overlap_rebuild = s.training().overlap_rebuild();
    const std::string name =
        device.empty() ? job::DeviceForStage(s, j) : device;
    try {
      config.device = torch::Device(name);
    } catch (const c10::Error&) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", j, ": unknown device \"", name, "\""));
    }
    config.channels_last = ChannelsLast(s, config.device);
    config.bf16_wire =
        s.training().wire_dtype() == petra::v1::TrainingSpec::WIRE_DTYPE_BF16;
    if (absl::Status tied =
            model::CheckTiedEnds(*net, ranges[j].begin, ranges[j].end);
        !tied.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", j, ": ", tied.message()));
    }
    try {  // building and placing the blocks can fail (no such device, OOM)
      std::vector<std::shared_ptr<model::Block>> blocks;
      // Running out of memory here is the job not fitting, said as such.
      if (absl::Status built = Guard(j, "building its blocks",
                                     [&]() -> absl::Status {
                                       blocks = model::BuildBlocks(
                                           *net, ranges[j].begin, ranges[j].end,
                                           s.seed());
                                       return absl::OkStatus();
                                     });
          !built.ok()) {
        return built;
      }
      out.push_back(std::make_unique<StageWorker>(
          std::move(blocks), config, s, LrSchedule(s, steps_per_epoch)));
    } catch (const c10::Error& e) {
      return absl::UnavailableError(
          absl::StrCat("stage ", j, ": cannot place it on \"", name,
                       "\": ", e.what_without_backtrace()));
    }
  }
  return out;
}

}  // namespace petra::engine

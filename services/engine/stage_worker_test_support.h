// What the stage worker's tests share: a small resolved job, workers over a
// freshly seeded network, synthetic micro-batches, PETRA's schedule driven
// in one thread, and exact backprop gradients to compare with.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "petra/v1/job.pb.h"
#include "services/data/batches.h"
#include "services/engine/stage_worker.h"
#include "services/model/partition.h"

namespace petra::engine::stage_testing {

// The tests' small networks: RevNets at width 1/8, transformers with 16
// tokens of 16 and 4 blocks (architecture and size only).
void SetSmallModel(petra::v1::Architecture arch, petra::v1::ModelSpec* model);

// A resolved job: RevNets at width 1/8 (i-RevNet at CIFAR size, for its
// squeezes), transformers with 16 tokens of 16 and 4 blocks; seed 11.
petra::v1::JobSpec Job(petra::v1::Architecture arch, uint32_t k,
                       bool bf16 = false);

// J workers over `ranges` of a freshly seeded network.
std::vector<std::unique_ptr<StageWorker>> Workers(
    const petra::v1::JobSpec& spec,
    const std::vector<model::BlockRange>& ranges, bool stash_inputs = false,
    bool stash_weights = false, torch::Device device = torch::kCPU,
    bool overlap_rebuild = false, bool rebuild_with_current = false);

// `n` synthetic micro-batches of `size` images shaped `chw`.
std::vector<data::Batch> Batches(int n, int size,
                                 std::vector<int64_t> chw = {1, 28, 28});

// Drives the PETRA schedule in one thread; `observe(stage, tick)` runs after
// each stage's work in a tick.
void RunPetraSchedule(std::vector<std::unique_ptr<StageWorker>>& w,
                      const std::vector<data::Batch>& batches,
                      const std::function<void(int, int64_t)>& observe = {});

// Exact backprop gradients of the same micro-batches, summed; with `bf16`,
// backprop in the precision the job's bf16 means: the blocks under bf16
// autocast, what passes between them in fp32, the loss in fp32.
// With `channels_last`, every image and convolution weight in it: the same
// kernels as the stages', as a deep network's gradient can be sensitive
// enough to the order of sums (i-RevNet's, per block: 4e-3 between NCHW
// and channels_last backprop on one draw of the data) that only the same
// operations make a fair reference.
// With `dtype` kDouble, the whole of it in float64: the reference against
// which fp32's own rounding shows.
std::vector<torch::Tensor> ExactGradients(
    const petra::v1::JobSpec& spec, const std::vector<data::Batch>& batches,
    bool bf16 = false, bool channels_last = false,
    torch::ScalarType dtype = torch::kFloat);

// Every tensor of `a` equals its counterpart in `b` (lists of one length).
bool Same(const std::vector<torch::Tensor>& a,
          const std::vector<torch::Tensor>& b);

}  // namespace petra::engine::stage_testing

namespace petra::engine {

// The stage worker tests' shorthands, named once here.
using model::TensorPair;
using stage_testing::Batches;
using stage_testing::ExactGradients;
using stage_testing::Job;
using stage_testing::RunPetraSchedule;
using stage_testing::Same;
using stage_testing::Workers;

}  // namespace petra::engine

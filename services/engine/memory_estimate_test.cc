#include "services/engine/memory_estimate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/model/partition_plan.h"

namespace petra::engine {
namespace {

using ::testing::HasSubstr;

struct Planned {
  petra::v1::JobSpec spec;
  std::vector<model::BlockSummary> blocks;
  std::vector<model::BlockRange> ranges;
  std::vector<int64_t> input;
};

Planned Plan(petra::v1::JobSpec raw) {
  Planned p;
  p.spec = *job::ResolveJobSpec(raw);
  model::NetworkBlueprint net = *model::DescribeNetwork(p.spec.model());
  p.blocks = model::SummarizeBlocks(net);
  p.ranges = *model::PlanPartition(net, p.spec);
  p.input = net.input_shape;
  return p;
}

petra::v1::JobSpec RevNet18(double width, uint32_t micro_batch) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(width);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  s.mutable_training()->set_micro_batch_size(micro_batch);
  return s;
}

TEST(EstimateStageMemory, TheMainJobFitsAndBuffersFollowTheMode) {
  petra::v1::JobSpec raw = RevNet18(0.25, 64);
  Planned p = Plan(raw);
  // Per block: stage 1 (reversible) keeps nothing under PETRA; stage 3
  // (downsampling) keeps its input for each micro-batch in flight.
  StageMemoryEstimate reversible =
      EstimateStageMemory(p.spec, p.blocks, p.ranges, 1, p.input);
  EXPECT_EQ(reversible.in_flight, 2 * (10 - 1 - 1) + 1);
  EXPECT_EQ(reversible.input_buffer_bytes, 0);
  EXPECT_EQ(reversible.weight_stash_bytes, 0);
  StageMemoryEstimate buffered =
      EstimateStageMemory(p.spec, p.blocks, p.ranges, 3, p.input);
  // 2 x 16 x 28 x 28 floats a sample, 64 samples, 13 in flight.
  EXPECT_EQ(buffered.input_buffer_bytes, 13 * 64 * 2 * 16 * 28 * 28 * 4);
  for (int j = 0; j < 10; ++j) {
    EXPECT_LT(
        EstimateStageMemory(p.spec, p.blocks, p.ranges, j, p.input).total(),
        int64_t{1} << 30)
        << j;
  }
  // PipeDream keeps inputs and weights on the reversible stage too.
  raw.mutable_training()->set_mode(petra::v1::TRAINING_MODE_DELAYED);
  raw.mutable_training()->set_stash_inputs(true);
  raw.mutable_training()->set_stash_weights(true);
  Planned pipedream = Plan(raw);
  StageMemoryEstimate kept = EstimateStageMemory(
      pipedream.spec, pipedream.blocks, pipedream.ranges, 1, pipedream.input);
  EXPECT_GT(kept.input_buffer_bytes, 0);
  EXPECT_EQ(kept.weight_stash_bytes,
            kept.in_flight * kept.parameters_bytes / 3);
  // Backprop has one micro-batch in flight.
  raw.mutable_training()->set_mode(petra::v1::TRAINING_MODE_BACKPROP);
  raw.mutable_training()->set_stash_inputs(false);
  raw.mutable_training()->set_stash_weights(false);
  Planned backprop = Plan(raw);
  EXPECT_EQ(EstimateStageMemory(backprop.spec, backprop.blocks, backprop.ranges,
                                3, backprop.input)
                .in_flight,
            1);
}

// Mode pipeline: GPipe keeps the flush's graphs on every stage but the
// last, 1F1B J - j of them; with recompute only the inputs a stage cannot
// rebuild.
TEST(EstimateStageMemory, PipelineModesKeepTheirFlushesGraphs) {
  petra::v1::JobSpec raw = RevNet18(0.25, 16);
  raw.mutable_partition()->set_stage_count(4);
  raw.mutable_training()->set_mode(petra::v1::TRAINING_MODE_PIPELINE);
  raw.mutable_training()->set_accumulation_steps(8);
  raw.mutable_training()->set_pipeline_schedule(
      petra::v1::TrainingSpec::PIPELINE_SCHEDULE_GPIPE);
  Planned gpipe = Plan(raw);
  raw.mutable_training()->set_pipeline_schedule(
      petra::v1::TrainingSpec::PIPELINE_SCHEDULE_1F1B);
  Planned one_f_one_b = Plan(raw);
  raw.mutable_training()->set_recompute(true);
  Planned recompute = Plan(raw);
  for (int j = 0; j < 3; ++j) {
    const StageMemoryEstimate g =
        EstimateStageMemory(gpipe.spec, gpipe.blocks, gpipe.ranges, j,
                            gpipe.input);
    const StageMemoryEstimate o = EstimateStageMemory(
        one_f_one_b.spec, one_f_one_b.blocks, one_f_one_b.ranges, j,
        one_f_one_b.input);
    const StageMemoryEstimate r = EstimateStageMemory(
        recompute.spec, recompute.blocks, recompute.ranges, j,
        recompute.input);
    EXPECT_EQ(g.in_flight, 8) << j;
    EXPECT_EQ(o.in_flight, 4 - j) << j;
    // The same graph a micro-batch.
    EXPECT_EQ(g.activation_bytes * o.in_flight, o.activation_bytes * 8) << j;
    EXPECT_GT(o.activation_bytes, 0) << j;
    EXPECT_EQ(g.input_buffer_bytes + o.input_buffer_bytes, 0) << j;
    EXPECT_EQ(r.activation_bytes, 0) << j;
    EXPECT_GT(g.total(), o.total()) << j;
    EXPECT_THAT(Breakdown(g), HasSubstr("activations kept for the backward"));
  }
  EXPECT_THAT(DoesNotFit(0,
                         EstimateStageMemory(gpipe.spec, gpipe.blocks,
                                             gpipe.ranges, 0, gpipe.input),
                         1, "test", gpipe.spec),
              HasSubstr("add --recompute"));
}

// The job of the issue that found the stack traces: RevNet50 at width 2,
// micro-batches of 2048 ImageNet images, on stage servers of 5 GB.
TEST(EstimateStageMemory, AJobFarTooBigIsSaidSoWithWhatToChange) {
  petra::v1::JobSpec raw;
  raw.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET50);
  raw.mutable_model()->set_width(2);
  raw.mutable_model()->set_variant(petra::v1::VARIANT_IMAGENET);
  raw.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  raw.mutable_training()->set_micro_batch_size(2048);
  raw.mutable_partition()->set_stage_count(4);
  Planned p = Plan(raw);
  const StageMemoryEstimate e =
      EstimateStageMemory(p.spec, p.blocks, p.ranges, 0, p.input);
  EXPECT_GT(e.total(), int64_t{5} << 30);
  const std::string text =
      DoesNotFit(0, e, int64_t{5} << 30, "its --memory-limit-bytes", p.spec);
  EXPECT_THAT(text, HasSubstr("stage 0 needs about "));
  EXPECT_THAT(text, HasSubstr("but this server has 5.4 GB (its "
                              "--memory-limit-bytes): lower --micro-batch"));
  EXPECT_THAT(text, HasSubstr("for a micro-batch of 2048"));
  EXPECT_EQ(text.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace petra::engine

// Every validation rule, one case each: the spec is refused as
// INVALID_ARGUMENT, naming the field, the value and the reason. Sizes,
// architectures, optimizers, devices, datasets and pipeline schedules
// here; modes, language models, precisions, decay, names and the rest in
// job_spec_rejections_more_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "services/job/job_spec_test_support.h"
#include "services/job/job_spec_validation.h"
#include "services/job/rejected_spec_test_support.h"

namespace petra::job {
namespace {

using petra::v1::JobSpec;
using ::testing::HasSubstr;

TEST_P(RejectedSpec, IsInvalidArgumentNamingFieldAndValue) {
  JobSpec s = MinimalSpec();
  GetParam().mutate(&s);
  absl::Status st = ValidateJobSpec(s);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(GetParam().field_and_value));
  EXPECT_THAT(std::string(st.message()), HasSubstr(GetParam().reason));
}

INSTANTIATE_TEST_SUITE_P(
    ModelDataAndTraining, RejectedSpec,
    ::testing::Values(
        RejectCase{"AccumulationZero",
                   [](JobSpec* s) {
                     s->mutable_training()->set_accumulation_steps(0);
                   },
                   "training.accumulation_steps = 0", "must be in [1, 4096]"},
        RejectCase{
            "MicroBatchZero",
            [](JobSpec* s) { s->mutable_training()->set_micro_batch_size(0); },
            "training.micro_batch_size = 0", "must be in [1,"},
        RejectCase{"EpochsZero",
                   [](JobSpec* s) { s->mutable_training()->set_epochs(0); },
                   "training.epochs = 0", "must be in [1,"},
        RejectCase{"ArchitectureMissing",
                   [](JobSpec* s) { s->mutable_model()->clear_architecture(); },
                   "model.architecture = unspecified",
                   "required (one of revnet18"},
        RejectCase{"ArchitectureUnknown",
                   [](JobSpec* s) {
                     s->mutable_model()->set_architecture(
                         static_cast<petra::v1::Architecture>(42));
                   },
                   "model.architecture = 42", "unknown value"},
        RejectCase{"DatasetMissing",
                   [](JobSpec* s) { s->mutable_dataset()->clear_kind(); },
                   "dataset.kind = unspecified",
                   "required (one of fashion_mnist"},
        RejectCase{"DatasetUnknown",
                   [](JobSpec* s) {
                     s->mutable_dataset()->set_kind(
                         static_cast<petra::v1::DatasetKind>(17));
                   },
                   "dataset.kind = 17", "unknown value"},
        RejectCase{
            "MoreStagesThanBlocks",
            [](JobSpec* s) { s->mutable_partition()->set_stage_count(11); },
            "partition.stage_count = 11", "RevNet18 has 10 blocks"},
        RejectCase{
            "ZeroStages",
            [](JobSpec* s) { s->mutable_partition()->set_stage_count(0); },
            "partition.stage_count = 0", "at least 1"},
        RejectCase{
            "PerBlockFalse",
            [](JobSpec* s) { s->mutable_partition()->set_per_block(false); },
            "partition.per_block = false", "give stage_count"},
        RejectCase{
            "NegativeLearningRate",
            [](JobSpec* s) { s->mutable_optimizer()->set_learning_rate(-0.1); },
            "optimizer.learning_rate = -0.1", "must be finite and >= 0"},
        RejectCase{
            "NanLearningRate",
            [](JobSpec* s) { s->mutable_optimizer()->set_learning_rate(NAN); },
            "optimizer.learning_rate = nan", "finite"},
        RejectCase{"MomentumWithAdamW",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_ADAMW);
                     s->mutable_optimizer()->set_momentum(0.9);
                   },
                   "optimizer.momentum = 0.9",
                   "only valid with optimizer kinds sgd and muon (AdamW's "
                   "and NAdamW's momentum is beta1)"},
        RejectCase{"BetaWithSgd",
                   [](JobSpec* s) { s->mutable_optimizer()->set_beta2(0.99); },
                   "optimizer.beta2 = 0.99",
                   "only valid with optimizer kinds adamw, nadamw and muon"},
        RejectCase{"PredictWeightsWithMuon",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_MUON);
                     s->mutable_training()->set_predict_weights(true);
                   },
                   "training.predict_weights = true",
                   "not with optimizer kind muon"},
        RejectCase{"MuonMomentumOne",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_MUON);
                     s->mutable_optimizer()->set_momentum(1);
                   },
                   "optimizer.momentum = 1", "must be in [0, 1)"},
        RejectCase{"MomentumDecayWithAdamW",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_ADAMW);
                     s->mutable_optimizer()->set_momentum_decay(0.004);
                   },
                   "optimizer.momentum_decay = 0.004",
                   "only valid with optimizer kind nadamw"},
        RejectCase{"NegativeMomentumDecay",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_NADAMW);
                     s->mutable_optimizer()->set_momentum_decay(-1);
                   },
                   "optimizer.momentum_decay = -1", "must be finite and >= 0"},
        RejectCase{"NAdamWUnderThePaperRecipe",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_NADAMW);
                     s->set_recipe(petra::v1::RECIPE_PAPER);
                   },
                   "optimizer.kind = nadamw", "not with recipe paper"},
        RejectCase{"NegativeDelayCompensation",
                   [](JobSpec* s) {
                     s->mutable_training()->set_delay_compensation(-0.5);
                   },
                   "training.delay_compensation = -0.5",
                   "must be finite and >= 0 (0: off)"},
        RejectCase{"InfiniteDelayCompensation",
                   [](JobSpec* s) {
                     s->mutable_training()->set_delay_compensation(INFINITY);
                   },
                   "training.delay_compensation = inf", "must be finite"},
        RejectCase{"DelayCompensationUnderBackprop",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_BACKPROP);
                     s->mutable_training()->set_delay_compensation(1);
                   },
                   "training.delay_compensation = 1",
                   "only valid with modes petra and delayed, not backprop"},
        RejectCase{"DiscrepancyCorrectionUnderForwardGradient",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_discrepancy_correction(true);
                   },
                   "training.discrepancy_correction = true",
                   "only valid with modes petra and delayed, not "
                   "forward_gradient"},
        RejectCase{
            "DiscrepancyCorrectionWithStashedWeights",
            [](JobSpec* s) {
              s->mutable_training()->set_mode(petra::v1::TRAINING_MODE_DELAYED);
              s->mutable_training()->set_stash_weights(true);
              s->mutable_training()->set_discrepancy_correction(true);
            },
            "training.discrepancy_correction = true", "not with stash_weights"},
        RejectCase{"WeightDriftDecayOne",
                   [](JobSpec* s) {
                     s->mutable_training()->set_weight_drift_decay(1);
                   },
                   "training.weight_drift_decay = 1", "must be in [0, 1)"},
        RejectCase{"BetaOne",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_ADAMW);
                     s->mutable_optimizer()->set_beta1(1.0);
                   },
                   "optimizer.beta1 = 1", "must be in [0, 1)"},
        RejectCase{"ZeroEps",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_ADAMW);
                     s->mutable_optimizer()->set_eps(0);
                   },
                   "optimizer.eps = 0", "must be finite and > 0"},
        RejectCase{"AdamWUnderThePaperRecipe",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_ADAMW);
                     s->set_recipe(petra::v1::RECIPE_PAPER);
                   },
                   "optimizer.kind = adamw", "not with recipe paper"},
        RejectCase{"SpikeCompensationWithAdamW",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_kind(
                         petra::v1::OptimizerSpec::KIND_ADAMW);
                     s->mutable_training()->set_spike_compensation(true);
                   },
                   "training.spike_compensation = true",
                   "needs optimizer kind sgd"},
        RejectCase{
            "NegativeClipNorm",
            [](JobSpec* s) { s->mutable_optimizer()->set_clip_grad_norm(-1); },
            "optimizer.clip_grad_norm = -1",
            "must be finite and >= 0 (0: no clipping)"},
        RejectCase{
            "MomentumOne",
            [](JobSpec* s) { s->mutable_optimizer()->set_momentum(1.0); },
            "optimizer.momentum = 1", "[0, 1)"},
        RejectCase{"NesterovWithoutMomentum",
                   [](JobSpec* s) {
                     s->mutable_optimizer()->set_momentum(0);
                     s->mutable_optimizer()->set_nesterov(true);
                   },
                   "optimizer.nesterov = true", "needs momentum > 0"},
        RejectCase{
            "NegativeWeightDecay",
            [](JobSpec* s) { s->mutable_optimizer()->set_weight_decay(-1e-4); },
            "optimizer.weight_decay = -0.0001", ">= 0"},
        RejectCase{"UnknownDevice", [](JobSpec* s) { s->add_devices("gpu0"); },
                   "devices[0]: unknown device \"gpu0\"", "cuda:N"},
        RejectCase{"BadCudaOrdinal",
                   [](JobSpec* s) { s->add_devices("cuda:-1"); },
                   "devices[0]: unknown device \"cuda:-1\"", "expected cpu"},
        RejectCase{"DeviceCountMismatch",
                   [](JobSpec* s) {
                     s->add_devices("cpu");
                     s->add_devices("cpu");
                     s->add_devices("cpu");
                   },
                   "devices = [cpu, cpu, cpu]", "the job has 10 stages"},
        RejectCase{"WidthZero",
                   [](JobSpec* s) { s->mutable_model()->set_width(0); },
                   "model.width = 0", "(0, 8]"},
        RejectCase{"OneClass",
                   [](JobSpec* s) { s->mutable_model()->set_num_classes(1); },
                   "model.num_classes = 1", "[2,"},
        RejectCase{"VariantDoesNotFitDataset",
                   [](JobSpec* s) {
                     s->mutable_model()->set_variant(petra::v1::VARIANT_CIFAR);
                   },
                   "model.variant = cifar", "needs variant mnist"},
        RejectCase{"ClassesDoNotFitDataset",
                   [](JobSpec* s) { s->mutable_model()->set_num_classes(100); },
                   "model.num_classes = 100", "has 10 classes"},
        RejectCase{"ImageFolderWithoutPath",
                   [](JobSpec* s) {
                     s->mutable_dataset()->set_kind(
                         petra::v1::DATASET_KIND_IMAGE_FOLDER);
                   },
                   "dataset.path = \"\"",
                   "an image folder needs its directory"},
        RejectCase{"ImageFolderOptionsForAnotherKind",
                   [](JobSpec* s) {
                     s->mutable_dataset()
                         ->mutable_image_folder()
                         ->set_random_resized_crop(false);
                   },
                   "dataset.image_folder = set",
                   "only for dataset kind image_folder"},
        RejectCase{
            "ImageFolderMeanWithoutStd",
            [](JobSpec* s) {
              s->mutable_dataset()->set_kind(
                  petra::v1::DATASET_KIND_IMAGE_FOLDER);
              s->mutable_dataset()->set_path("imgs");
              s->mutable_dataset()->mutable_image_folder()->add_mean(0.5);
            },
            "dataset.image_folder.mean = 1 means, 0 stds", "one per channel"},
        RejectCase{"ImageFolderStdZero",
                   [](JobSpec* s) {
                     s->mutable_dataset()->set_kind(
                         petra::v1::DATASET_KIND_IMAGE_FOLDER);
                     s->mutable_dataset()->set_path("imgs");
                     auto* f = s->mutable_dataset()->mutable_image_folder();
                     for (int c = 0; c < 3; ++c) {
                       f->add_mean(0.5);
                       f->add_std(c == 1 ? 0 : 0.2);
                     }
                   },
                   "dataset.image_folder.std = 0",
                   "must be finite and above 0"},
        RejectCase{
            "DatasetPathEscapes",
            [](JobSpec* s) { s->mutable_dataset()->set_path("../../etc"); },
            "dataset.path = \"../../etc\"", "\"..\""},
        // Found by tests/fuzz: accepted, then no JSON job record could be
        // written and no gRPC peer could parse the spec.
        RejectCase{"NameNotUtf8",
                   [](JobSpec* s) {
                     s->set_name(
                         "mni\xff\xff\xff\xf6"
                         "st");
                   },
                   "name = \"mni\\xff\\xff\\xff\\xf6st\"",
                   "must be UTF-8 text"},
        RejectCase{"DatasetPathNotUtf8",
                   [](JobSpec* s) {
                     // An overlong "/", then a lone surrogate.
                     s->mutable_dataset()->set_path(
                         "a\xc0\xaf"
                         "b\xed\xa0\x80");
                   },
                   "dataset.path = \"a\\xc0\\xaf\\x62\\xed\\xa0\\x80\"",
                   "must be UTF-8 text"},
        RejectCase{"ResumeFromJobNotUtf8",
                   [](JobSpec* s) {
                     // A sequence cut short.
                     s->mutable_checkpoint()->set_resume_from_job(
                         "job-\xe2\x82");
                   },
                   "checkpoint.resume_from_job = \"job-\\xe2\\x82\"",
                   "must be UTF-8 text"},
        RejectCase{
            "StashWithoutDelayedMode",
            [](JobSpec* s) { s->mutable_training()->set_stash_inputs(true); },
            "training.stash_inputs = true",
            "only valid with mode delayed, not petra"},
        RejectCase{"PipelineScheduleOutsidePipelineMode",
                   [](JobSpec* s) {
                     s->mutable_training()->set_pipeline_schedule(
                         petra::v1::TrainingSpec::PIPELINE_SCHEDULE_GPIPE);
                   },
                   "training.pipeline_schedule = gpipe",
                   "only valid with mode pipeline, not petra"},
        RejectCase{
            "RecomputeOutsidePipelineMode",
            [](JobSpec* s) { s->mutable_training()->set_recompute(true); },
            "training.recompute = true",
            "only valid with mode pipeline, not petra"},
        RejectCase{"PipelineScheduleUnknown",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_PIPELINE);
                     s->mutable_training()->set_pipeline_schedule(
                         static_cast<petra::v1::TrainingSpec::PipelineSchedule>(
                             7));
                   },
                   "training.pipeline_schedule = 7", "gpipe"},
        RejectCase{"GpipeWindowBelowItsFlush",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_PIPELINE);
                     s->mutable_training()->set_pipeline_schedule(
                         petra::v1::TrainingSpec::PIPELINE_SCHEDULE_GPIPE);
                     s->mutable_training()->set_accumulation_steps(8);
                     s->mutable_training()->set_max_in_flight(4);
                   },
                   "training.max_in_flight = 4",
                   "GPipe holds a flush's 8 micro-batches"},
        RejectCase{"PipelineOverlapWithoutRecompute",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_PIPELINE);
                     s->mutable_training()->set_overlap_rebuild(true);
                   },
                   "training.overlap_rebuild = true",
                   "rebuilds only with recompute"},
        RejectCase{"PipelineWithWeightPrediction",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_PIPELINE);
                     s->mutable_training()->set_predict_weights(true);
                   },
                   "training.predict_weights = true",
                   "only valid with modes petra and delayed, not pipeline"},
        RejectCase{"DelayedWithoutBuffers",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_DELAYED);
                   },
                   "training.mode = delayed",
                   "needs stash_inputs and/or stash_weights"},
        RejectCase{"RebuildWithStashedUnderPetra",
                   [](JobSpec* s) {
                     s->mutable_training()->set_rebuild_with(
                         petra::v1::TrainingSpec::REBUILD_WITH_STASHED);
                   },
                   "training.rebuild_with = stashed", "needs stashed weights"},
        RejectCase{"RebuildWithWhereInputsAreKept",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_DELAYED);
                     s->mutable_training()->set_stash_inputs(true);
                     s->mutable_training()->set_stash_weights(true);
                     s->mutable_training()->set_rebuild_with(
                         petra::v1::TrainingSpec::REBUILD_WITH_CURRENT);
                   },
                   "training.rebuild_with = current",
                   "nothing is rebuilt when stash_inputs keeps every input"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace petra::job

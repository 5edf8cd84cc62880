#include "services/job/job_spec_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_test_support.h"

namespace petra::job {
namespace {

using petra::v1::JobSpec;
using petra::v1::ScheduleSpec;
using ::testing::HasSubstr;

// An image folder's class count is left for the data to say
// (data::FillFromData): no default of 10 for a folder of 3 classes.
TEST(ResolveJobSpec, AnImageFoldersClassCountIsLeftToItsFolder) {
  JobSpec s = MinimalSpec();
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_IMAGE_FOLDER);
  s.mutable_dataset()->set_path("imgs");
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->model().has_num_classes());
  s.mutable_model()->set_num_classes(1);  // given: validated as given
  r = ResolveJobSpec(s);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("model.num_classes = 1"));
}

TEST(ResolveJobSpec, MinimalSpecGetsTheDocumentedDefaults) {
  absl::StatusOr<JobSpec> r = ResolveJobSpec(MinimalSpec());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model().variant(), petra::v1::VARIANT_MNIST);
  EXPECT_EQ(r->model().width(), 1.0);
  EXPECT_EQ(r->model().num_classes(), 10u);
  EXPECT_EQ(r->dataset().path(), "fashion-mnist");
  EXPECT_EQ(r->dataset().augmentation().random_crop_padding(), 0u);
  EXPECT_FALSE(r->dataset().augmentation().horizontal_flip());
  EXPECT_TRUE(r->partition().per_block());
  EXPECT_EQ(r->training().mode(), petra::v1::TRAINING_MODE_PETRA);
  // The same 64 samples a step as micro-batches of 64 (the rate's batch),
  // each stage's delay in steps a quarter (RECIPE_DEFAULT).
  EXPECT_EQ(r->training().accumulation_steps(), 4u);
  EXPECT_EQ(r->training().micro_batch_size(), 16u);
  EXPECT_TRUE(r->training().predict_weights());
  EXPECT_EQ(r->training().epochs(), 1u);
  EXPECT_DOUBLE_EQ(r->optimizer().learning_rate(), 0.1 * 64 / 256);
  EXPECT_DOUBLE_EQ(r->optimizer().momentum(), 0.9);
  EXPECT_TRUE(r->optimizer().nesterov());
  EXPECT_DOUBLE_EQ(r->optimizer().weight_decay(), 5e-4);
  EXPECT_EQ(r->schedule().decay(), petra::v1::ScheduleSpec::DECAY_COSINE);
  EXPECT_EQ(r->evaluation().every_epochs(), 1u);
  EXPECT_EQ(r->checkpoint().keep_last(), 2u);
  EXPECT_EQ(r->checkpoint().every_epochs(), 1u);
  EXPECT_EQ(StageCount(*r), 10);
  EXPECT_EQ(DeviceForStage(*r, 3), "cpu");
  EXPECT_EQ(r->transport(), petra::v1::TRANSPORT_AUTO);
}

TEST(ResolveJobSpec, LearningRateFollowsTheScalingRule) {
  JobSpec s = MinimalSpec();
  s.mutable_training()->set_micro_batch_size(32);
  s.mutable_training()->set_accumulation_steps(4);
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->optimizer().learning_rate(), 0.1 * 32 * 4 / 256);
}

TEST(ResolveJobSpec, ExplicitValuesAreKept) {
  JobSpec s = MinimalSpec();
  s.mutable_optimizer()->set_momentum(0);
  s.mutable_optimizer()->set_weight_decay(0);
  s.mutable_partition()->set_stage_count(2);
  s.add_devices("cpu");
  s.add_devices("cuda:1");
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer().momentum(), 0);
  EXPECT_FALSE(r->optimizer().nesterov());  // follows momentum
  EXPECT_EQ(r->optimizer().weight_decay(), 0);
  EXPECT_EQ(StageCount(*r), 2);
  EXPECT_EQ(DeviceForStage(*r, 1), "cuda:1");
}

TEST(ResolveJobSpec, TextFieldsMayBeAnyUtf8) {
  JobSpec s = MinimalSpec();
  // Two-, three- and four-byte sequences, the highest code point.
  s.set_name("Mod\u00e8le \u2713 \U0001F680 \U0010FFFF");
  s.mutable_dataset()->set_path("donn\u00e9es/fashion-mnist");
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name(), s.name());
}

// A synchronous pipeline: 1F1B, the recipe's 64 samples a step cut into a
// flush of micro-batches (never one, which is backprop), no weight
// prediction (nothing is late).
TEST(ResolveJobSpec, PipelineModeFlushesTheRecipesStep) {
  JobSpec s = MinimalSpec();
  s.mutable_training()->set_mode(petra::v1::TRAINING_MODE_PIPELINE);
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->training().pipeline_schedule(),
            petra::v1::TrainingSpec::PIPELINE_SCHEDULE_1F1B);
  EXPECT_EQ(r->training().micro_batch_size(), 16u);
  EXPECT_EQ(r->training().accumulation_steps(), 4u);
  EXPECT_FALSE(r->training().predict_weights());
  EXPECT_FALSE(r->training().recompute());
  struct Case {
    uint32_t micro_batch, accumulation;  // 0: unset
    uint32_t want_micro_batch, want_accumulation;
  } cases[] = {{32, 0, 32, 2}, {64, 0, 64, 2}, {100, 0, 100, 2},
               {0, 8, 8, 8},   {0, 128, 1, 128}, {4, 3, 4, 3}};
  for (const Case& c : cases) {
    JobSpec t = s;
    if (c.micro_batch > 0) t.mutable_training()->set_micro_batch_size(c.micro_batch);
    if (c.accumulation > 0) {
      t.mutable_training()->set_accumulation_steps(c.accumulation);
    }
    absl::StatusOr<JobSpec> got = ResolveJobSpec(t);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->training().micro_batch_size(), c.want_micro_batch)
        << c.micro_batch << " x " << c.accumulation;
    EXPECT_EQ(got->training().accumulation_steps(), c.want_accumulation)
        << c.micro_batch << " x " << c.accumulation;
  }
  // A language model's flush: 8 sequences of 8.
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  s.mutable_model()->clear_width();
  s.mutable_dataset()->Clear();
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->training().micro_batch_size(), 8u);
  EXPECT_EQ(r->training().accumulation_steps(), 8u);
}

TEST(ResolveJobSpec, DelayedModeWithBuffersIsValid) {
  JobSpec s = MinimalSpec();
  s.mutable_training()->set_mode(petra::v1::TRAINING_MODE_DELAYED);
  s.mutable_training()->set_stash_inputs(true);
  s.mutable_training()->set_stash_weights(true);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
}

// Every row of the paper's Table 4 has a flag combination; the rebuild's
// weights default to the ones the stage has.
TEST(ResolveJobSpec, RebuildWeightsDefaultToWhatTheStageKeeps) {
  using petra::v1::TrainingSpec;
  struct Case {
    petra::v1::TrainingMode mode;
    bool inputs, weights;
    TrainingSpec::RebuildWith set, resolved;
  } cases[] = {
      {petra::v1::TRAINING_MODE_PETRA, false, false,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED,
       TrainingSpec::REBUILD_WITH_CURRENT},
      {petra::v1::TRAINING_MODE_DELAYED, false, true,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED,
       TrainingSpec::REBUILD_WITH_STASHED},
      {petra::v1::TRAINING_MODE_DELAYED, false, true,
       TrainingSpec::REBUILD_WITH_CURRENT, TrainingSpec::REBUILD_WITH_CURRENT},
      // Nothing rebuilt: nothing to choose.
      {petra::v1::TRAINING_MODE_DELAYED, true, false,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED},
      {petra::v1::TRAINING_MODE_DELAYED, true, true,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED},
      {petra::v1::TRAINING_MODE_BACKPROP, false, false,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED,
       TrainingSpec::REBUILD_WITH_UNSPECIFIED},
  };
  for (const Case& c : cases) {
    JobSpec s = MinimalSpec();
    s.mutable_training()->set_mode(c.mode);
    s.mutable_training()->set_stash_inputs(c.inputs);
    s.mutable_training()->set_stash_weights(c.weights);
    s.mutable_training()->set_rebuild_with(c.set);
    absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->training().rebuild_with(), c.resolved)
        << s.training().ShortDebugString();
  }
}

// The paper's recipe: its values at its own lengths, the same schedule
// compressed on shorter runs, and explicit values still win.
TEST(ResolveJobSpec, PaperRecipeFollowsThePaperForTheDataset) {
  using petra::v1::ScheduleSpec;
  auto resolve = [](petra::v1::Variant variant, uint32_t epochs,
                    const std::function<void(JobSpec*)>& more = {}) {
    JobSpec s = MinimalSpec();
    s.set_recipe(petra::v1::RECIPE_PAPER);
    s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
    s.mutable_model()->set_variant(variant);
    s.mutable_training()->set_epochs(epochs);
    s.mutable_training()->set_accumulation_steps(4);
    if (more) more(&s);
    absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(JobSpec());
  };
  auto drops = [](const JobSpec& r) {
    return std::vector<uint32_t>(r.schedule().step_epochs().begin(),
                                 r.schedule().step_epochs().end());
  };
  JobSpec cifar = resolve(petra::v1::VARIANT_CIFAR, 300);
  EXPECT_EQ(cifar.recipe(), petra::v1::RECIPE_PAPER);
  EXPECT_DOUBLE_EQ(cifar.optimizer().learning_rate(), 0.1 * 64 * 4 / 256);
  EXPECT_DOUBLE_EQ(cifar.optimizer().momentum(), 0.9);
  EXPECT_TRUE(cifar.optimizer().nesterov());
  EXPECT_DOUBLE_EQ(cifar.optimizer().weight_decay(), 5e-4);
  EXPECT_DOUBLE_EQ(cifar.schedule().warmup_epochs(), 5.0);
  EXPECT_EQ(cifar.schedule().decay(), ScheduleSpec::DECAY_STEP);
  EXPECT_THAT(drops(cifar), ::testing::ElementsAre(150, 225));
  EXPECT_DOUBLE_EQ(cifar.schedule().step_factor(), 0.1);

  JobSpec imagenet = resolve(petra::v1::VARIANT_IMAGENET, 90);
  EXPECT_DOUBLE_EQ(imagenet.optimizer().weight_decay(), 1e-4);
  EXPECT_DOUBLE_EQ(imagenet.schedule().warmup_epochs(), 5.0);
  EXPECT_THAT(drops(imagenet), ::testing::ElementsAre(30, 60, 80));
  // Longer than the paper: the same fractions of the run; 5 epochs of
  // warm-up still.
  EXPECT_THAT(drops(resolve(petra::v1::VARIANT_IMAGENET, 120)),
              ::testing::ElementsAre(40, 80, 107));

  // Compressed: 15 epochs of MNIST-sized data take CIFAR-10's shape.
  JobSpec short_run = resolve(petra::v1::VARIANT_MNIST, 15);
  EXPECT_DOUBLE_EQ(short_run.schedule().warmup_epochs(), 0.25);
  EXPECT_THAT(drops(short_run), ::testing::ElementsAre(8, 11));
  EXPECT_DOUBLE_EQ(short_run.optimizer().weight_decay(), 5e-4);
  // Too short for any drop: constant after the warm-up.
  JobSpec one = resolve(petra::v1::VARIANT_CIFAR, 1);
  EXPECT_EQ(one.schedule().decay(), ScheduleSpec::DECAY_CONSTANT);
  EXPECT_TRUE(drops(one).empty());

  // Explicit values win.
  JobSpec mine = resolve(petra::v1::VARIANT_CIFAR, 300, [](JobSpec* s) {
    s->mutable_optimizer()->set_weight_decay(0);
    s->mutable_schedule()->set_warmup_epochs(1);
    s->mutable_schedule()->add_step_epochs(100);
  });
  EXPECT_DOUBLE_EQ(mine.optimizer().weight_decay(), 0);
  EXPECT_DOUBLE_EQ(mine.schedule().warmup_epochs(), 1);
  EXPECT_THAT(drops(mine), ::testing::ElementsAre(100));
  JobSpec cosine = resolve(petra::v1::VARIANT_CIFAR, 300, [](JobSpec* s) {
    s->mutable_schedule()->set_decay(ScheduleSpec::DECAY_COSINE);
  });
  EXPECT_EQ(cosine.schedule().decay(), ScheduleSpec::DECAY_COSINE);
  EXPECT_TRUE(drops(cosine).empty());

  // The default recipe is unchanged.
  JobSpec ours = *ResolveJobSpec(MinimalSpec());
  EXPECT_EQ(ours.recipe(), petra::v1::RECIPE_DEFAULT);
  EXPECT_EQ(ours.schedule().decay(), ScheduleSpec::DECAY_COSINE);
  EXPECT_DOUBLE_EQ(ours.schedule().warmup_epochs(), 0);
}

// Transformers default to their own recipe: AdamW after DeiT, a warm-up of
// 5 epochs (a third of a shorter run), cosine decay and delay-scaled rates
// (power 1); an optimizer flag chosen by hand keeps that optimizer's own
// defaults.
TEST(ResolveJobSpec, TransformersTrainWithTheTransformerRecipe) {
  for (auto arch :
       {petra::v1::ARCHITECTURE_REVVIT, petra::v1::ARCHITECTURE_VIT}) {
    JobSpec s = MinimalSpec();
    s.mutable_model()->set_architecture(arch);
    s.mutable_training()->set_accumulation_steps(2);
    JobSpec r = *ResolveJobSpec(s);
    EXPECT_EQ(r.recipe(), petra::v1::RECIPE_TRANSFORMER);
    EXPECT_EQ(r.optimizer().kind(), petra::v1::OptimizerSpec::KIND_ADAMW);
    EXPECT_DOUBLE_EQ(r.optimizer().learning_rate(),
                     kAdamWLearningRatePer64 * 64 * 2 / 64);
    EXPECT_DOUBLE_EQ(r.optimizer().weight_decay(), 0.05);
    EXPECT_DOUBLE_EQ(r.optimizer().beta1(), 0.9);
    EXPECT_DOUBLE_EQ(r.optimizer().beta2(), 0.999);
    EXPECT_DOUBLE_EQ(r.optimizer().eps(), 1e-8);
    EXPECT_FALSE(r.optimizer().has_momentum());
    EXPECT_DOUBLE_EQ(r.schedule().warmup_epochs(), 1.0 / 3);
    EXPECT_EQ(r.schedule().decay(), ScheduleSpec::DECAY_COSINE);
    EXPECT_DOUBLE_EQ(r.schedule().delay_lr_power(), 1);
    EXPECT_DOUBLE_EQ(r.schedule().delay_lr_anneal_epochs(), 0);
    s.mutable_training()->set_epochs(300);
    EXPECT_DOUBLE_EQ(ResolveJobSpec(s)->schedule().warmup_epochs(), 5);
    s.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_SGD);
    r = *ResolveJobSpec(s);
    EXPECT_EQ(r.recipe(), petra::v1::RECIPE_TRANSFORMER);
    EXPECT_DOUBLE_EQ(r.optimizer().learning_rate(), 0.1 * 64 * 2 / 256);
    EXPECT_DOUBLE_EQ(r.optimizer().momentum(), 0.9);
    EXPECT_FALSE(r.optimizer().has_beta1());
  }
  // A CNN keeps SGD; asked for, AdamW comes with its own defaults.
  JobSpec cnn = MinimalSpec();
  EXPECT_EQ(ResolveJobSpec(cnn)->optimizer().kind(),
            petra::v1::OptimizerSpec::KIND_SGD);
  cnn.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_ADAMW);
  JobSpec r = *ResolveJobSpec(cnn);
  EXPECT_EQ(r.recipe(), petra::v1::RECIPE_DEFAULT);
  EXPECT_DOUBLE_EQ(r.optimizer().weight_decay(), 0.05);
  EXPECT_DOUBLE_EQ(r.schedule().warmup_epochs(), 0);
  EXPECT_DOUBLE_EQ(r.optimizer().clip_grad_norm(), 0);
  EXPECT_DOUBLE_EQ(r.schedule().delay_lr_power(), 0);
}

// Each input gets its own patch side, and one given is kept.
TEST(ResolveJobSpec, TransformerPatchesFitTheInput) {
  JobSpec s = MinimalSpec();
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVVIT);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  for (auto [variant, patch] : {std::pair{petra::v1::VARIANT_MNIST, 7u},
                                std::pair{petra::v1::VARIANT_CIFAR, 4u},
                                std::pair{petra::v1::VARIANT_IMAGENET, 16u}}) {
    s.mutable_model()->set_variant(variant);
    absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->model().transformer().patch_size(), patch) << variant;
  }
  s.mutable_model()->mutable_transformer()->set_patch_size(8);
  EXPECT_EQ(ResolveJobSpec(s)->model().transformer().patch_size(), 8u);
  EXPECT_EQ(ResolveJobSpec(s)->model().transformer().stem(),
            petra::v1::TransformerSpec::STEM_CONV);
  // The conv stem halves 224 three times for patches of 7: 28 tokens a
  // side, not 32; the patchify stem takes them.
  s.mutable_model()->set_variant(petra::v1::VARIANT_IMAGENET);
  s.mutable_model()->mutable_transformer()->set_patch_size(7);
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("model.transformer.patch_size = 7: the conv stem's "
                        "stride-2 convolutions take 224 to 28 tokens a side, "
                        "not 32; use a power of two or --stem patch"));
  s.mutable_model()->mutable_transformer()->set_stem(
      petra::v1::TransformerSpec::STEM_PATCH);
  EXPECT_TRUE(ResolveJobSpec(s).ok());
  s.mutable_model()->mutable_transformer()->set_stem(
      static_cast<petra::v1::TransformerSpec::Stem>(9));
  r = ResolveJobSpec(s);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("model.transformer.stem"));
}

TEST(ResolveJobSpec, ForwardGradientGuessesLocallyByDefault) {
  JobSpec s = MinimalSpec();
  s.mutable_training()->set_mode(petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->training().forward_gradient().guess(),
            petra::v1::ForwardGradientSpec::GUESS_LOCAL);
  // Other modes get no forward_gradient field.
  r = ResolveJobSpec(MinimalSpec());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->training().has_forward_gradient());
}

TEST(ResolveJobSpec, IRevNetNeedsSidesDivisibleByEight) {
  JobSpec s = MinimalSpec();
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_IREVNET18);
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);  // Fashion-MNIST: 28x28
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("model.variant = mnist: irevnet18 squeezes"));
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_model()->set_variant(petra::v1::VARIANT_CIFAR);
  EXPECT_TRUE(ResolveJobSpec(s).ok());
}

TEST(ResolveJobSpec, SplitPointsMustIncreaseWithinTheBlocks) {
  JobSpec s = MinimalSpec();
  auto* splits = s.mutable_partition()->mutable_splits();
  splits->add_split_at(4);
  splits->add_split_at(7);
  absl::StatusOr<JobSpec> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(StageCount(*r), 3);
  splits->add_split_at(7);   // not increasing
  splits->add_split_at(10);  // RevNet18 has blocks 0..9
  r = ResolveJobSpec(s);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("partition.splits.split_at[2] = 7: must be greater "
                        "than 7"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("partition.splits.split_at[3] = 10: must be greater "
                        "than 7 and less than 10 (RevNet18's blocks)"));
}

TEST(ResolveJobSpec, ReportsEveryProblemAtOnce) {
  JobSpec s = MinimalSpec();
  s.mutable_training()->set_epochs(0);
  s.mutable_training()->set_micro_batch_size(0);
  absl::Status st = ValidateJobSpec(s);
  EXPECT_THAT(std::string(st.message()), HasSubstr("training.epochs = 0"));
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("training.micro_batch_size = 0"));
}

}  // namespace
}  // namespace petra::job

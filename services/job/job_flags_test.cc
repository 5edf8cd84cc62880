#include "services/job/job_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_validation.h"

namespace petra::job {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

absl::Status ParseInto(const std::vector<std::string>& args,
                       petra::v1::JobSpec* spec) {
  base::FlagSet flags("test", "test");
  AddJobFlags(flags, spec);
  return flags.Parse(args);
}

// The help states each variant's patch default as ResolveJobSpec applies it.
TEST(JobFlags, HelpShowsThePatchSizeEachVariantGets) {
  base::FlagSet flags("test", "test");
  petra::v1::JobSpec spec;
  AddJobFlags(flags, &spec);
  EXPECT_THAT(
      flags.Help(),
      HasSubstr(absl::StrCat(
          "default: ", catalog::DefaultPatchSize(petra::v1::VARIANT_MNIST),
          " for mnist, ", catalog::DefaultPatchSize(petra::v1::VARIANT_CIFAR),
          " for cifar, ",
          catalog::DefaultPatchSize(petra::v1::VARIANT_IMAGENET),
          " for imagenet")));
}

// What a new user did: `petra train --help` said --epochs 1, --stages
// per-block, --seed 0 while the job it trains without flags had 3 epochs, 2
// stages and seed 1. The help's defaults are what the job gets.
TEST(JobFlags, HelpShowsTheBaseJobsValuesAsDefaults) {
  petra::v1::JobSpec base;
  base.set_name("base-job");
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  base.mutable_model()->set_width(0.25);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  base.mutable_partition()->set_stage_count(2);
  base.mutable_training()->set_epochs(3);
  base.mutable_training()->set_micro_batch_size(16);
  base.set_seed(1);
  base::FlagSet flags("test", "test");
  petra::v1::JobSpec spec;
  AddJobFlags(flags, &spec, base);
  const std::string help = flags.Help();
  for (const char* shown :
       {"(default: base-job)", "(default: revnet18)", "(default: 0.25)",
        "(default: fashion_mnist)", "(default: mnist)", "(default: 2)",
        "(default: 3)", "(default: 16)", "(default: 1)"}) {
    EXPECT_THAT(help, HasSubstr(shown));
  }
  // Flag by flag (a long flag's text wraps), for those the user compared.
  const auto line_of = [&](const std::string& flag) {
    const size_t at = help.find("\n  --" + flag + " ");
    EXPECT_NE(at, std::string::npos) << flag;
    return help.substr(at, help.find("\n  --", at + 1) - at);
  };
  EXPECT_THAT(line_of("epochs"), HasSubstr("(default: 3)"));
  EXPECT_THAT(line_of("stages"), HasSubstr("(default: 2)"));
  EXPECT_THAT(line_of("seed"), HasSubstr("(default: 1)"));
  EXPECT_THAT(line_of("micro-batch"), HasSubstr("(default: 16)"));

  // With no base: the defaults every spec gets (job_spec_defaults.cc).
  petra::v1::JobSpec defaults;
  ApplyJobSpecDefaults(&defaults);
  base::FlagSet plain("test", "test");
  AddJobFlags(plain, &spec);
  const std::string plain_help = plain.Help();
  EXPECT_THAT(plain_help,
              HasSubstr(absl::StrCat("passes over the training set (default: ",
                                     defaults.training().epochs(), ")")));
  EXPECT_THAT(plain_help, HasSubstr("one per residual block (default: "
                                    "per-block)"));
}

TEST(JobFlags, MapToSpecFields) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--arch",
                         "revnet34",
                         "--dataset=cifar10",
                         "--width",
                         "0.5",
                         "--stages",
                         "4",
                         "--mode",
                         "delayed",
                         "--stash-inputs",
                         "--accumulation",
                         "2",
                         "--micro-batch",
                         "32",
                         "--epochs",
                         "12",
                         "--lr",
                         "0.05",
                         "--momentum",
                         "0",
                         "--decay",
                         "step",
                         "--step-epochs",
                         "5,9",
                         "--seed",
                         "3",
                         "--devices",
                         "cuda:0,cuda:1,cpu,cpu"},
                        &spec)
                  .ok());
  EXPECT_EQ(spec.model().architecture(), petra::v1::ARCHITECTURE_REVNET34);
  EXPECT_EQ(spec.dataset().kind(), petra::v1::DATASET_KIND_CIFAR10);
  EXPECT_EQ(spec.model().width(), 0.5);
  EXPECT_EQ(spec.partition().stage_count(), 4u);
  EXPECT_EQ(spec.training().mode(), petra::v1::TRAINING_MODE_DELAYED);
  EXPECT_TRUE(spec.training().stash_inputs());
  EXPECT_EQ(spec.training().accumulation_steps(), 2u);
  EXPECT_EQ(spec.training().micro_batch_size(), 32u);
  EXPECT_EQ(spec.training().epochs(), 12u);
  EXPECT_EQ(spec.optimizer().learning_rate(), 0.05);
  EXPECT_TRUE(spec.optimizer().has_momentum());
  EXPECT_THAT(spec.schedule().step_epochs(), ::testing::ElementsAre(5, 9));
  EXPECT_EQ(spec.seed(), 3u);
  EXPECT_EQ(spec.devices_size(), 4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobFlags, SplitAtCutsTheStagesByHand) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--split-at", "4,7"}, &spec).ok());
  ASSERT_TRUE(spec.partition().has_splits());
  EXPECT_THAT(spec.partition().splits().split_at(), ElementsAre(4u, 7u));
}

TEST(JobFlags, UnsetFlagsLeaveFieldsUnset) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--arch", "revnet18"}, &spec).ok());
  EXPECT_FALSE(spec.training().has_epochs());
  EXPECT_FALSE(spec.optimizer().has_learning_rate());
}

TEST(JobFlags, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {{"--arch", "revnet19"},
            "flag --arch: value: unknown value \"revnet19\""},
           {{"--epochs", "-1"}, "flag --epochs: bad value \"-1\""},
           {{"--lr", "fast"}, "flag --lr: bad value \"fast\""},
           {{"--stages", "many"}, "flag --stages: bad value \"many\""},
           {{"--split-at", "4,x"}, "flag --split-at: bad value \"x\""},
           {{"--step-epochs", "1,x"}, "flag --step-epochs"},
           {{"--micro-batch"}, "flag --micro-batch needs a value"}}) {
    petra::v1::JobSpec spec;
    absl::Status s = ParseInto(c.args, &spec);
    ASSERT_FALSE(s.ok()) << c.args[0];
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.expected));
  }
}

TEST(JobFlags, OverlayReplacesRepeatedFieldsAndLayout) {
  petra::v1::JobSpec base;
  base.add_devices("cpu");
  base.mutable_partition()->set_stage_count(3);
  base.set_seed(1);
  petra::v1::JobSpec overrides;
  overrides.add_devices("cuda:0");
  overrides.mutable_partition()->set_per_block(true);
  OverlayJobSpec(overrides, &base);
  EXPECT_THAT(base.devices(), ::testing::ElementsAre("cuda:0"));
  EXPECT_TRUE(base.partition().per_block());
  EXPECT_EQ(base.seed(), 1u);
}

// A resolved spec (what `petra spec` prints) reused with another --mode:
// the old mode's settings give way, what the flags set stays.
TEST(JobFlags, AnotherModeStartsFromItsOwnModeSettings) {
  petra::v1::JobSpec raw;
  raw.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  raw.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  ASSERT_TRUE(
      ParseInto({"--mode", "delayed", "--stash-weights", "--predict-weights"},
                &raw)
          .ok());
  absl::StatusOr<petra::v1::JobSpec> delayed = ResolveJobSpec(raw);
  ASSERT_TRUE(delayed.ok()) << delayed.status();
  ASSERT_EQ(delayed->training().rebuild_with(),
            petra::v1::TrainingSpec::REBUILD_WITH_STASHED);
  for (const std::string mode :
       {"backprop", "petra", "forward_gradient", "delayed"}) {
    petra::v1::JobSpec spec = *delayed, overrides;
    ASSERT_TRUE(ParseInto({"--mode", mode}, &overrides).ok());
    OverlayJobSpec(overrides, &spec);
    absl::StatusOr<petra::v1::JobSpec> r = ResolveJobSpec(spec);
    EXPECT_TRUE(r.ok()) << mode << ": " << r.status();
  }
  petra::v1::JobSpec spec = *delayed, overrides;
  ASSERT_TRUE(ParseInto({"--mode", "petra"}, &overrides).ok());
  OverlayJobSpec(overrides, &spec);
  absl::StatusOr<petra::v1::JobSpec> petra = ResolveJobSpec(spec);
  ASSERT_TRUE(petra.ok()) << petra.status();
  EXPECT_EQ(petra->training().rebuild_with(),
            petra::v1::TrainingSpec::REBUILD_WITH_CURRENT);
  EXPECT_FALSE(petra->training().stash_weights());
  EXPECT_TRUE(petra->training().predict_weights());  // still valid: kept
  // A mode setting given beside the mode is the user's, and is judged.
  spec = *delayed;
  overrides.Clear();
  ASSERT_TRUE(
      ParseInto({"--mode", "backprop", "--predict-weights"}, &overrides).ok());
  OverlayJobSpec(overrides, &spec);
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              HasSubstr("training.predict_weights"));
}

// The transformer flags, and --arch revvit over a CNN job (the default
// `petra train` job is a RevNet18 of width 0.25): the width goes, the
// transformer's defaults come, and the flags given still win.
TEST(JobFlags, TransformerSizesAndAnotherArchitecture) {
  petra::v1::JobSpec base;
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  base.mutable_model()->set_width(0.25);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  petra::v1::JobSpec overrides;
  ASSERT_TRUE(
      ParseInto({"--arch", "revvit", "--embed-dim", "48", "--depth", "12",
                 "--heads", "3", "--mlp-ratio", "1.5", "--patch-size", "7",
                 "--stem", "patch", "--variant", "mnist"},
                &overrides)
          .ok());
  OverlayJobSpec(overrides, &base);
  absl::StatusOr<petra::v1::JobSpec> r = ResolveJobSpec(base);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model().width(), 1.0);
  const petra::v1::TransformerSpec& t = r->model().transformer();
  EXPECT_EQ(t.embed_dim(), 48u);
  EXPECT_EQ(t.depth(), 12u);
  EXPECT_EQ(t.heads(), 3u);
  EXPECT_EQ(t.stem(), petra::v1::TransformerSpec::STEM_PATCH);
  EXPECT_EQ(t.mlp_ratio(), 1.5);
  EXPECT_EQ(t.patch_size(), 7u);
  EXPECT_EQ(StageCount(*r), 14);  // per block: stem, 12 blocks, head

  // Sizes that do not fit are refused naming the field.
  for (const auto& [args, expected] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--heads", "5"}, "model.transformer.heads"},
           {{"--patch-size", "5"}, "model.transformer.patch_size"},
           {{"--depth", "0"}, "model.transformer.depth"},
           {{"--mlp-ratio", "0"}, "model.transformer.mlp_ratio"},
           {{"--variant", "imagenet", "--patch-size", "2"},
            "gives 12544 tokens of a 224x224 input; at most 4096"},
           {{"--width", "0.5"}, "width must be 1"}}) {
    petra::v1::JobSpec bad = base;
    ASSERT_TRUE(ParseInto(args, &bad).ok());
    absl::Status s = ValidateJobSpec(bad);
    EXPECT_THAT(std::string(s.message()), HasSubstr(expected)) << args[0];
  }
  petra::v1::JobSpec unknown_stem;
  EXPECT_THAT(
      std::string(ParseInto({"--stem", "swin"}, &unknown_stem).message()),
      HasSubstr("swin"));
  // A CNN has no transformer sizes.
  petra::v1::JobSpec cnn;
  cnn.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  cnn.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  ASSERT_TRUE(ParseInto({"--depth", "3"}, &cnn).ok());
  EXPECT_THAT(std::string(ValidateJobSpec(cnn).message()),
              HasSubstr("only revvit and vit have transformer sizes"));
}

// The base's name ("default-revnet18-fashion-mnist") is dropped once the
// flags change its network or its data, and kept otherwise.
TEST(AssembleJobSpec, TheBasesNameGoesWithItsNetworkOrData) {
  petra::v1::JobSpec base;
  base.set_name("default-revnet18-fashion-mnist");
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  auto name = [&](const std::vector<std::string>& args) {
    petra::v1::JobSpec overrides;
    EXPECT_TRUE(ParseInto(args, &overrides).ok());
    absl::StatusOr<petra::v1::JobSpec> s = AssembleJobSpec(base, "", overrides);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->name() : "?";
  };
  EXPECT_EQ(name({"--epochs", "1"}), "default-revnet18-fashion-mnist");
  EXPECT_EQ(name({"--arch", "revnet18"}), "default-revnet18-fashion-mnist");
  EXPECT_EQ(name({"--arch", "revvit"}), "");
  EXPECT_EQ(name({"--dataset", "synthetic"}), "");
  EXPECT_EQ(name({"--arch", "revvit", "--name", "mine"}), "mine");
}

// The small micro-batches and weight prediction of the language model's
// and the default recipe are defaults for delayed gradients only, give way
// to what the flags set, and are left out where the optimizer gives nothing
// to predict with; the transformer recipe's are 32 x 2, without prediction
// (AdamW's step gave it nothing, docs/BENCHMARKS.md).
TEST(AssembleJobSpec, TheDelayDefaultsYieldToTheFlags) {
  petra::v1::JobSpec base;
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  struct Case {
    std::vector<std::string> args;
    uint32_t micro_batch, k;
    bool predict;
  };
  for (const Case& c : std::vector<Case>{
           {{"--arch", "revlm", "--mode", "backprop"}, 64, 1, false},
           {{"--arch", "revlm", "--micro-batch", "32"}, 32, 1, true},
           {{"--arch", "revlm", "--accumulation", "2"}, 64, 2, true},
           {{"--arch", "gpt", "--mode", "delayed", "--stash-weights"},
            8,
            8,
            true},
           {{"--arch", "revlm", "--optimizer", "muon"}, 8, 8, false},
           {{"--arch", "revlm", "--predict-weights=false"}, 8, 8, false},
           {{"--arch", "revnet18"}, 16, 4, true},
           {{"--arch", "resnet18", "--mode", "delayed", "--stash-inputs"},
            16,
            4,
            true},
           {{"--arch", "revnet18", "--mode", "backprop"}, 64, 1, false},
           {{"--arch", "revnet18", "--micro-batch", "64"}, 64, 1, true},
           {{"--arch", "revnet18", "--momentum", "0"}, 16, 4, false},
           {{"--arch", "revnet18", "--recipe", "paper"}, 64, 1, false},
           {{"--arch", "revvit"}, 32, 2, false},
           {{"--arch", "vit", "--mode", "delayed", "--stash-weights"},
            32,
            2,
            false},
           {{"--arch", "revvit", "--mode", "backprop"}, 64, 1, false},
           {{"--arch", "revvit", "--accumulation", "1"}, 64, 1, false}}) {
    petra::v1::JobSpec overrides;
    ASSERT_TRUE(ParseInto(c.args, &overrides).ok());
    absl::StatusOr<petra::v1::JobSpec> s = AssembleJobSpec(base, "", overrides);
    const std::string what = absl::StrJoin(c.args, " ");
    ASSERT_TRUE(s.ok()) << what << ": " << s.status();
    EXPECT_EQ(s->training().micro_batch_size(), c.micro_batch) << what;
    EXPECT_EQ(s->training().accumulation_steps(), c.k) << what;
    EXPECT_EQ(s->training().predict_weights(), c.predict) << what;
  }
}

// `petra train --arch revlm` with nothing else: the language model's sizes
// and recipe, on the embedded text corpus with the bytes tokenizer.
TEST(AssembleJobSpec, ALanguageModelGetsTextAndItsOwnSizes) {
  petra::v1::JobSpec base;
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  base.mutable_model()->set_width(0.25);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  petra::v1::JobSpec overrides;
  ASSERT_TRUE(ParseInto({"--arch", "revlm"}, &overrides).ok());
  absl::StatusOr<petra::v1::JobSpec> s = AssembleJobSpec(base, "", overrides);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dataset().kind(), petra::v1::DATASET_KIND_TEXT);
  EXPECT_EQ(s->dataset().path(), "");  // the embedded corpus
  EXPECT_EQ(s->dataset().text().tokenizer(),
            petra::v1::TextSpec::TOKENIZER_BYTES);
  EXPECT_EQ(s->model().width(), 1.0);
  EXPECT_EQ(s->model().transformer().seq_len(), 128u);
  EXPECT_EQ(s->model().transformer().vocab(), 256u);
  EXPECT_EQ(s->model().num_classes(), 256u);
  // The language-model recipe: AdamW with beta2 0.95, decay 0.1, clipping
  // at 1, 1e-3 at 64 sequences a step, a twentieth of the run warming up.
  EXPECT_EQ(s->recipe(), petra::v1::RECIPE_LANGUAGE_MODEL);
  EXPECT_EQ(s->optimizer().kind(), petra::v1::OptimizerSpec::KIND_ADAMW);
  EXPECT_EQ(s->optimizer().beta1(), 0.9);
  EXPECT_EQ(s->optimizer().beta2(), 0.95);
  EXPECT_EQ(s->optimizer().weight_decay(), 0.1);
  EXPECT_EQ(s->optimizer().clip_grad_norm(), 1.0);
  // Its delayed gradients: 64 sequences a step in micro-batches of 8, and
  // the forward at the weights predicted for the gradient's return.
  EXPECT_EQ(s->training().micro_batch_size(), 8u);
  EXPECT_EQ(s->training().accumulation_steps(), 8u);
  EXPECT_TRUE(s->training().predict_weights());
  EXPECT_DOUBLE_EQ(s->optimizer().learning_rate(), 1e-3);
  EXPECT_DOUBLE_EQ(s->schedule().warmup_epochs(),
                   s->training().epochs() / 20.0);
  EXPECT_EQ(s->schedule().decay(), petra::v1::ScheduleSpec::DECAY_COSINE);
  EXPECT_EQ(s->schedule().delay_lr_power(), 1.0);
  // Four times the sequences a step: twice the rate (square-root rule).
  petra::v1::JobSpec bigger;
  ASSERT_TRUE(
      ParseInto({"--arch", "gpt", "--micro-batch", "256"}, &bigger).ok());
  absl::StatusOr<petra::v1::JobSpec> b = AssembleJobSpec(base, "", bigger);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->recipe(), petra::v1::RECIPE_LANGUAGE_MODEL);
  EXPECT_DOUBLE_EQ(b->optimizer().learning_rate(), 2e-3);
  // A SentencePiece tokenizer: SentencePiece's 8000 pieces unless --vocab.
  for (auto [args, vocab] :
       {std::pair<std::vector<std::string>, uint32_t>{
            {"--arch", "revlm", "--tokenizer", "sentencepiece"}, 8000},
        {{"--arch", "revlm", "--tokenizer", "sentencepiece", "--vocab", "1024"},
         1024}}) {
    petra::v1::JobSpec pieces;
    ASSERT_TRUE(ParseInto(args, &pieces).ok());
    absl::StatusOr<petra::v1::JobSpec> p = AssembleJobSpec(base, "", pieces);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->dataset().text().tokenizer(),
              petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE);
    EXPECT_EQ(p->model().transformer().vocab(), vocab);
    EXPECT_EQ(p->model().num_classes(), vocab);
  }
  petra::v1::JobSpec unknown;
  EXPECT_THAT(ParseInto({"--tokenizer", "bpe"}, &unknown).message(),
              HasSubstr("sentencepiece"));
  // Back to an image model: its images come back with it.
  ASSERT_TRUE(ParseInto({"--arch", "resnet18"}, &overrides).ok());
  s = AssembleJobSpec(*s, "", overrides);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dataset().kind(), petra::v1::DATASET_KIND_FASHION_MNIST);
  EXPECT_EQ(s->model().num_classes(), 10u);
}

// Each table row names its field by path (job_flags.cc): a path that is
// not a field of the compiled proto shows in the help as the row's error.
TEST(JobFlags, EveryFlagOfTheTableNamesAFieldOfTheSpec) {
  base::FlagSet flags("test", "test");
  petra::v1::JobSpec spec;
  AddJobFlags(flags, &spec);
  const std::string help = flags.Help();
  EXPECT_THAT(help, Not(HasSubstr("has no field")));
  EXPECT_THAT(help, Not(HasSubstr("is a message")));
  EXPECT_THAT(help, Not(HasSubstr("is repeated")));
}

// The field's type comes from the descriptor: a flag of each kind parses
// into the field it names.
TEST(JobFlags, EachKindOfFieldParsesFromItsFlag) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--priority", "-5", "--seed", "7", "--lr", "0.5",
                         "--recompute", "--mode", "pipeline", "--devices",
                         "cpu,cpu", "--step-epochs", "2,4", "--split-at",
                         "0,2", "--guess", "random", "--name", "x"},
                        &spec)
                  .ok());
  EXPECT_EQ(spec.priority(), -5);
  EXPECT_EQ(spec.seed(), 7u);
  EXPECT_EQ(spec.optimizer().learning_rate(), 0.5);
  EXPECT_TRUE(spec.training().recompute());
  EXPECT_EQ(spec.training().mode(), petra::v1::TRAINING_MODE_PIPELINE);
  EXPECT_EQ(spec.devices_size(), 2);
  EXPECT_THAT(spec.schedule().step_epochs(), ElementsAre(2, 4));
  EXPECT_THAT(spec.partition().splits().split_at(), ElementsAre(0, 2));
  EXPECT_EQ(spec.training().forward_gradient().guess(),
            petra::v1::ForwardGradientSpec::GUESS_RANDOM);
  EXPECT_EQ(spec.name(), "x");
  petra::v1::JobSpec other;
  EXPECT_THAT(ParseInto({"--priority", "99999999999"}, &other).message(),
              HasSubstr("--priority"));
  EXPECT_THAT(ParseInto({"--epochs", "-1"}, &other).message(),
              HasSubstr("--epochs"));
}

}  // namespace
}  // namespace petra::job

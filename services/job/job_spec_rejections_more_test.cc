// Every validation rule, one case each (continued from
// job_spec_rejections_test.cc, which holds the test): modes and their
// features, language models, transports, precisions, forward gradients,
// the learning-rate decay, evaluation, names and synthetic sizes.
#include <gtest/gtest.h>

#include <cstdint>

#include "services/job/rejected_spec_test_support.h"

namespace petra::job {
namespace {

using petra::v1::JobSpec;
using petra::v1::ScheduleSpec;

INSTANTIATE_TEST_SUITE_P(
    TrainingScheduleAndNames, RejectedSpec,
    ::testing::Values(
        RejectCase{"RebuildWithUnderBackprop",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_BACKPROP);
                     s->mutable_training()->set_rebuild_with(
                         petra::v1::TrainingSpec::REBUILD_WITH_CURRENT);
                   },
                   "training.rebuild_with = current",
                   "only valid with modes petra and delayed, not backprop"},
        RejectCase{"PredictWeightsUnderBackprop",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_BACKPROP);
                     s->mutable_training()->set_predict_weights(true);
                   },
                   "training.predict_weights = true",
                   "only valid with modes petra and delayed, not backprop"},
        RejectCase{"PredictWeightsWithoutMomentum",
                   [](JobSpec* s) {
                     s->mutable_training()->set_predict_weights(true);
                     s->mutable_optimizer()->set_momentum(0);
                   },
                   "training.predict_weights = true",
                   "needs optimizer.momentum > 0"},
        RejectCase{"SpikeCompensationUnderForwardGradient",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_spike_compensation(true);
                   },
                   "training.spike_compensation = true",
                   "only valid with modes petra and delayed, not "
                   "forward_gradient"},
        RejectCase{"SpikeCompensationWithoutMomentum",
                   [](JobSpec* s) {
                     s->mutable_training()->set_spike_compensation(true);
                     s->mutable_optimizer()->set_momentum(0);
                   },
                   "training.spike_compensation = true",
                   "needs optimizer.momentum > 0"},
        RejectCase{"EndToEndCheckUnderForwardGradient",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_end_to_end_every(5);
                   },
                   "training.end_to_end_every = 5",
                   "not with mode forward_gradient"},
        RejectCase{"RecipeUnknown",
                   [](JobSpec* s) {
                     s->set_recipe(static_cast<petra::v1::Recipe>(9));
                   },
                   "recipe = 9", "unknown value"},
        RejectCase{"TextForAnImageModel",
                   [](JobSpec* s) {
                     s->mutable_dataset()->set_kind(
                         petra::v1::DATASET_KIND_TEXT);
                   },
                   "dataset.kind = text", "trains a language model"},
        RejectCase{"LanguageModelOnImages",
                   [](JobSpec* s) {
                     s->mutable_model()->set_architecture(
                         petra::v1::ARCHITECTURE_REVLM);
                     s->mutable_model()->clear_width();
                   },
                   "model.architecture = revlm",
                   "a language model trains on text"},
        RejectCase{"BytesVocabularyIs256",
                   [](JobSpec* s) {
                     AsLanguageModel(s, petra::v1::ARCHITECTURE_GPT);
                     s->mutable_model()->mutable_transformer()->set_vocab(300);
                   },
                   "model.transformer.vocab = 300",
                   "the bytes tokenizer has 256 symbols"},
        RejectCase{"SentencePieceVocabularyBelowItsBytes",
                   [](JobSpec* s) {
                     AsLanguageModel(s, petra::v1::ARCHITECTURE_REVLM);
                     s->mutable_dataset()->mutable_text()->set_tokenizer(
                         petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE);
                     s->mutable_model()->mutable_transformer()->set_vocab(256);
                   },
                   "model.transformer.vocab = 256",
                   "a SentencePiece tokenizer needs at least 260 pieces"},
        RejectCase{"LanguageModelWithForwardGradient",
                   [](JobSpec* s) {
                     AsLanguageModel(s, petra::v1::ARCHITECTURE_REVLM);
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                   },
                   "training.mode = forward_gradient",
                   "not for language models yet"},
        RejectCase{
            "TiedEmbeddingsOnTwoStages",
            [](JobSpec* s) {
              AsLanguageModel(s, petra::v1::ARCHITECTURE_REVLM);
              s->mutable_model()->mutable_transformer()->set_tie_embeddings(
                  true);
              s->mutable_partition()->set_stage_count(2);
            },
            "model.transformer.tie_embeddings = true",
            "only on one stage (--stages 1)"},
        RejectCase{
            "TiedEmbeddingsOfAnImageModel",
            [](JobSpec* s) {
              s->mutable_model()->set_architecture(
                  petra::v1::ARCHITECTURE_REVVIT);
              s->mutable_model()->mutable_transformer()->set_tie_embeddings(
                  true);
            },
            "model.transformer.tie_embeddings = true", "only a language model"},
        RejectCase{
            "SeqLenTooLong",
            [](JobSpec* s) {
              AsLanguageModel(s, petra::v1::ARCHITECTURE_REVLM);
              s->mutable_model()->mutable_transformer()->set_seq_len(100000);
            },
            "model.transformer.seq_len = 100000", "must be in [1, 4096]"},
        RejectCase{"TransportUnknown",
                   [](JobSpec* s) {
                     s->set_transport(static_cast<petra::v1::Transport>(9));
                   },
                   "transport = 9", "unknown value"},
        RejectCase{"TransportCudaIpcOnTheCpu",
                   [](JobSpec* s) {
                     s->set_transport(petra::v1::TRANSPORT_CUDA_IPC);
                     s->add_devices("cpu");
                   },
                   "transport = cuda_ipc", "devices has \"cpu\""},
        RejectCase{"RebuildWithUnknown",
                   [](JobSpec* s) {
                     s->mutable_training()->set_rebuild_with(
                         static_cast<petra::v1::TrainingSpec::RebuildWith>(7));
                   },
                   "training.rebuild_with = 7", "unknown value"},
        RejectCase{"PrecisionUnknown",
                   [](JobSpec* s) {
                     s->mutable_training()->set_precision(
                         static_cast<petra::v1::TrainingSpec::Precision>(7));
                   },
                   "training.precision = 7", "unknown value"},
        RejectCase{"MemoryFormatUnknown",
                   [](JobSpec* s) {
                     s->mutable_training()->set_memory_format(
                         static_cast<petra::v1::TrainingSpec::MemoryFormat>(9));
                   },
                   "training.memory_format = 9", "unknown value"},
        RejectCase{"WireDtypeUnknown",
                   [](JobSpec* s) {
                     s->mutable_training()->set_wire_dtype(
                         static_cast<petra::v1::TrainingSpec::WireDtype>(5));
                   },
                   "training.wire_dtype = 5", "unknown value"},
        RejectCase{"Bf16WithForwardGradient",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_precision(
                         petra::v1::TrainingSpec::PRECISION_BF16);
                   },
                   "training.precision = bf16",
                   "forward-mode derivatives run in fp32 only"},
        RejectCase{"Bf16WireWithForwardGradient",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_wire_dtype(
                         petra::v1::TrainingSpec::WIRE_DTYPE_BF16);
                   },
                   "training.wire_dtype = bf16", "tangents travel in fp32"},
        RejectCase{"ForwardGradientOnOneStage",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_partition()->set_stage_count(1);
                   },
                   "training.mode = forward_gradient",
                   "needs 2 or more stages"},
        RejectCase{"ForwardGradientWithStashedWeights",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_stash_weights(true);
                   },
                   "training.stash_weights = true",
                   "only valid with mode delayed, not forward_gradient"},
        RejectCase{"ForwardGradientWithOverlappedRebuild",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
                     s->mutable_training()->set_overlap_rebuild(true);
                   },
                   "training.overlap_rebuild = true", "rebuilds nothing"},
        RejectCase{
            "ForwardGradientSkippingNonFinite",
            [](JobSpec* s) {
              s->mutable_training()->set_mode(
                  petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
              s->mutable_training()->set_non_finite(
                  petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH);
            },
            "training.non_finite = skip_micro_batch",
            "forward_gradient fails on NaN or Inf"},
        RejectCase{
            "GuessWithoutForwardGradient",
            [](JobSpec* s) {
              s->mutable_training()->mutable_forward_gradient()->set_guess(
                  petra::v1::ForwardGradientSpec::GUESS_RANDOM);
            },
            "training.forward_gradient = set",
            "only valid with mode forward_gradient, not petra"},
        RejectCase{
            "UnknownGuess",
            [](JobSpec* s) {
              s->mutable_training()->set_mode(
                  petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
              s->mutable_training()->mutable_forward_gradient()->set_guess(
                  static_cast<petra::v1::ForwardGradientSpec::Guess>(7));
            },
            "training.forward_gradient.guess = 7", "unknown value"},
        RejectCase{"UnknownMode",
                   [](JobSpec* s) {
                     s->mutable_training()->set_mode(
                         static_cast<petra::v1::TrainingMode>(9));
                   },
                   "training.mode = 9", "unknown value"},
        RejectCase{"WarmupLongerThanTraining",
                   [](JobSpec* s) {
                     s->mutable_training()->set_epochs(3);
                     s->mutable_schedule()->set_warmup_epochs(5);
                   },
                   "schedule.warmup_epochs = 5", "[0, training.epochs = 3]"},
        RejectCase{
            "StepEpochsWithoutStepDecay",
            [](JobSpec* s) { s->mutable_schedule()->add_step_epochs(1); },
            "schedule.step_epochs = [1]",
            "only valid with decay step, not cosine"},
        RejectCase{"StepDecayWithoutEpochs",
                   [](JobSpec* s) {
                     s->mutable_schedule()->set_decay(ScheduleSpec::DECAY_STEP);
                   },
                   "schedule.step_epochs = []", "at least one epoch"},
        RejectCase{"StepEpochsNotIncreasing",
                   [](JobSpec* s) {
                     s->mutable_training()->set_epochs(10);
                     s->mutable_schedule()->set_decay(ScheduleSpec::DECAY_STEP);
                     s->mutable_schedule()->add_step_epochs(5);
                     s->mutable_schedule()->add_step_epochs(5);
                   },
                   "schedule.step_epochs[1] = 5", "must increase"},
        RejectCase{
            "StepFactorZero",
            [](JobSpec* s) { s->mutable_schedule()->set_step_factor(0); },
            "schedule.step_factor = 0", "(0, 1]"},
        RejectCase{
            "DelayLrPowerAboveFour",
            [](JobSpec* s) { s->mutable_schedule()->set_delay_lr_power(5); },
            "schedule.delay_lr_power = 5", "[0, 4]"},
        RejectCase{
            "DelayLrPowerNegative",
            [](JobSpec* s) { s->mutable_schedule()->set_delay_lr_power(-1); },
            "schedule.delay_lr_power = -1", "[0, 4]"},
        RejectCase{"DelayLrAnnealLongerThanTraining",
                   [](JobSpec* s) {
                     s->mutable_training()->set_epochs(3);
                     s->mutable_schedule()->set_delay_lr_power(1);
                     s->mutable_schedule()->set_delay_lr_anneal_epochs(4);
                   },
                   "schedule.delay_lr_anneal_epochs = 4",
                   "[0, training.epochs = 3]"},
        RejectCase{"DelayLrAnnealWithoutPower",
                   [](JobSpec* s) {
                     s->mutable_schedule()->set_delay_lr_anneal_epochs(1);
                   },
                   "schedule.delay_lr_anneal_epochs = 1",
                   "anneals schedule.delay_lr_power, which is 0"},
        RejectCase{
            "EvalEveryZero",
            [](JobSpec* s) { s->mutable_evaluation()->set_every_epochs(0); },
            "evaluation.every_epochs = 0", "at least 1"},
        RejectCase{
            "KeepLastZero",
            [](JobSpec* s) { s->mutable_checkpoint()->set_keep_last(0); },
            "checkpoint.keep_last = 0", "at least 1"},
        RejectCase{"ResumeFromPath",
                   [](JobSpec* s) {
                     s->mutable_checkpoint()->set_resume_from_job("../x");
                   },
                   "checkpoint.resume_from_job = \"../x\"", "not a path"},
        RejectCase{"NameTooLong",
                   [](JobSpec* s) { s->set_name(std::string(200, 'a')); },
                   "name = <200 characters>", "at most 128"},
        RejectCase{"PriorityAboveTheTop",
                   [](JobSpec* s) { s->set_priority(101); }, "priority = 101",
                   "must be -100 to 100"},
        RejectCase{"PriorityBelowTheBottom",
                   [](JobSpec* s) { s->set_priority(-101); }, "priority = -101",
                   "must be -100 to 100"},
        RejectCase{"NameWithControlCharacters",
                   [](JobSpec* s) { s->set_name("a\nb"); }, "name = \"a\\nb\"",
                   "control characters"},
        RejectCase{"NameWithARightToLeftOverride",
                   [](JobSpec* s) { s->set_name("gpu\u202Etxt.exe"); },
                   "name = \"gpu\\xe2\\x80\\xaetxt.exe\"", "(it holds U+202E)"},
        RejectCase{"NameWithALineSeparator",
                   [](JobSpec* s) { s->set_name("a\u2028b"); },
                   "name = ", "(it holds U+2028)"},
        RejectCase{
            "NameWithAZeroWidthSpace",
            [](JobSpec* s) { s->set_name("a\u200Bb"); }, "name = ",
            "invisible formatting, or line separators (it holds U+200B)"},
        RejectCase{"SyntheticSizeZero",
                   [](JobSpec* s) {
                     s->mutable_dataset()->set_synthetic_train_size(0);
                   },
                   "dataset.synthetic_train_size = 0", "must be 1 to 1048576"},
        RejectCase{"SyntheticSizeBeyondMemory",
                   [](JobSpec* s) {
                     s->mutable_dataset()->set_synthetic_test_size(uint64_t{1}
                                                                   << 40);
                   },
                   "dataset.synthetic_test_size = 1099511627776",
                   "a synthetic set is made in memory"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace petra::job

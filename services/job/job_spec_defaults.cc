#include "services/job/job_spec_defaults.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "services/catalog/architecture_catalog.h"

namespace petra::job {

using petra::v1::DatasetKind;

const char* DefaultDatasetPath(DatasetKind kind) {
  switch (kind) {
    // Debian's dataset-fashion-mnist installs here (under /usr/share/datasets).
    case petra::v1::DATASET_KIND_FASHION_MNIST:
      return "fashion-mnist";
    case petra::v1::DATASET_KIND_MNIST:
      return "mnist";
    case petra::v1::DATASET_KIND_CIFAR10:
      return "cifar-10-batches-bin";
    default:
      return "";
  }
}

namespace {

// The PETRA paper's schedule (section 4.1), fitted to the run's length:
// fills only the fields left unset. Values: proto/petra/v1/training.proto,
// Recipe.
void ApplyPaperRecipe(petra::v1::JobSpec* spec) {
  const bool imagenet = spec->model().variant() == petra::v1::VARIANT_IMAGENET;
  const double paper_epochs = imagenet ? 90 : 300;
  const std::vector<double> drops = imagenet ? std::vector<double>{30, 60, 80}
                                             : std::vector<double>{150, 225};
  const uint32_t epochs = spec->training().epochs();
  const double scale = std::min(1.0, epochs / paper_epochs);

  petra::v1::OptimizerSpec* opt = spec->mutable_optimizer();
  if (!opt->has_weight_decay()) opt->set_weight_decay(imagenet ? 1e-4 : 5e-4);
  petra::v1::ScheduleSpec* sched = spec->mutable_schedule();
  if (!sched->has_warmup_epochs()) sched->set_warmup_epochs(5.0 * scale);
  if (sched->decay() != petra::v1::ScheduleSpec::DECAY_UNSPECIFIED &&
      sched->decay() != petra::v1::ScheduleSpec::DECAY_STEP) {
    return;  // another decay asked for: no drops
  }
  if (sched->step_epochs_size() == 0) {
    for (double d : drops) {
      const int64_t e = std::llround(d * epochs / paper_epochs);
      const int n = sched->step_epochs_size();
      if (e >= 1 && e < epochs &&
          (n == 0 || e > static_cast<int64_t>(sched->step_epochs(n - 1)))) {
        sched->add_step_epochs(static_cast<uint32_t>(e));
      }
    }
  }
  if (sched->decay() == petra::v1::ScheduleSpec::DECAY_UNSPECIFIED) {
    sched->set_decay(sched->step_epochs_size() > 0
                         ? petra::v1::ScheduleSpec::DECAY_STEP
                         : petra::v1::ScheduleSpec::DECAY_CONSTANT);
  }
}

// The network's: its geometry, a transformer's sizes, its classes.
void ApplyModelDefaults(petra::v1::JobSpec* spec) {
  petra::v1::ModelSpec* model = spec->mutable_model();
  petra::v1::DatasetSpec* data = spec->mutable_dataset();
  const DatasetKind kind = data->kind();
  const bool mnist_like = kind == petra::v1::DATASET_KIND_FASHION_MNIST ||
                          kind == petra::v1::DATASET_KIND_MNIST;

  // A language model has no image geometry.
  if (model->variant() == petra::v1::VARIANT_UNSPECIFIED &&
      !catalog::IsLanguageModel(model->architecture())) {
    model->set_variant(mnist_like ? petra::v1::VARIANT_MNIST
                                  : petra::v1::VARIANT_CIFAR);
  }
  if (!model->has_width()) model->set_width(1.0);
  if (catalog::IsLanguageModel(model->architecture())) {
    using D = catalog::LanguageModelDefaults;
    petra::v1::TransformerSpec* t = model->mutable_transformer();
    if (!t->has_embed_dim()) t->set_embed_dim(D::kEmbedDim);
    if (!t->has_depth()) t->set_depth(D::kDepth);
    if (!t->has_heads()) t->set_heads(D::kHeads);
    if (!t->has_mlp_ratio()) t->set_mlp_ratio(D::kMlpRatio);
    if (!t->has_seq_len()) t->set_seq_len(D::kSeqLen);
    if (kind == petra::v1::DATASET_KIND_TEXT &&
        data->text().tokenizer() ==
            petra::v1::TextSpec::TOKENIZER_UNSPECIFIED) {
      data->mutable_text()->set_tokenizer(petra::v1::TextSpec::TOKENIZER_BYTES);
    }
    if (!t->has_vocab()) {
      t->set_vocab(data->text().tokenizer() ==
                           petra::v1::TextSpec::TOKENIZER_SENTENCEPIECE
                       ? D::kSentencePieceVocab
                       : D::kVocab);
    }
    // The logits' classes are the vocabulary.
    if (!model->has_num_classes()) model->set_num_classes(t->vocab());
  }
  if (catalog::IsTransformer(model->architecture())) {
    using D = catalog::TransformerDefaults;
    petra::v1::TransformerSpec* t = model->mutable_transformer();
    if (!t->has_embed_dim()) t->set_embed_dim(D::kEmbedDim);
    if (!t->has_depth()) t->set_depth(D::kDepth);
    if (!t->has_heads()) t->set_heads(D::kHeads);
    if (!t->has_mlp_ratio()) t->set_mlp_ratio(D::kMlpRatio);
    if (!t->has_patch_size()) {
      t->set_patch_size(catalog::DefaultPatchSize(model->variant()));
    }
    if (t->stem() == petra::v1::TransformerSpec::STEM_UNSPECIFIED) {
      // Early convolutions (Xiao et al. 2021): one epoch of Fashion-MNIST
      // 3.5 points above patchify by backprop (docs/BENCHMARKS.md).
      t->set_stem(petra::v1::TransformerSpec::STEM_CONV);
    }
  }
  // An image folder's class count is its train/ folder's, read where the
  // data is (data::FillFromData), not guessed here.
  if (!model->has_num_classes() &&
      kind != petra::v1::DATASET_KIND_IMAGE_FOLDER) {
    model->set_num_classes(
        model->variant() == petra::v1::VARIANT_IMAGENET ? 1000 : 10);
  }
}

// The data's: where it is, an image folder's policies, augmentation.
void ApplyDataDefaults(petra::v1::JobSpec* spec) {
  petra::v1::DatasetSpec* data = spec->mutable_dataset();
  const DatasetKind kind = data->kind();
  const bool cifar = spec->model().variant() == petra::v1::VARIANT_CIFAR;
  if (data->path().empty()) data->set_path(DefaultDatasetPath(kind));
  if (!data->has_synthetic_train_size()) data->set_synthetic_train_size(4096);
  if (!data->has_synthetic_test_size()) data->set_synthetic_test_size(1024);
  const bool folder = kind == petra::v1::DATASET_KIND_IMAGE_FOLDER;
  if (folder) {
    petra::v1::ImageFolderSpec* f = data->mutable_image_folder();
    if (!f->has_random_resized_crop()) f->set_random_resized_crop(true);
    if (f->corrupt_images() ==
        petra::v1::ImageFolderSpec::CORRUPT_IMAGE_POLICY_UNSPECIFIED) {
      f->set_corrupt_images(
          petra::v1::ImageFolderSpec::CORRUPT_IMAGE_POLICY_FAIL);
    }
  }
  // A random resized crop already crops: no padded crop on top of it.
  const bool resized_crop =
      folder && data->image_folder().random_resized_crop();
  petra::v1::AugmentationSpec* aug = data->mutable_augmentation();
  if (!aug->has_random_crop_padding())
    aug->set_random_crop_padding(cifar && !resized_crop ? 4 : 0);
  if (!aug->has_horizontal_flip()) aug->set_horizontal_flip(cifar || folder);
  if (!aug->has_normalize()) aug->set_normalize(true);
}

// How the network is cut into stages.
void ApplyPartitionDefaults(petra::v1::JobSpec* spec) {
  petra::v1::PartitionSpec* part = spec->mutable_partition();
  if (part->layout_case() == petra::v1::PartitionSpec::LAYOUT_NOT_SET) {
    part->set_per_block(true);
  }
  if (part->cost() == petra::v1::PartitionSpec::COST_UNSPECIFIED) {
    part->set_cost(petra::v1::PartitionSpec::COST_ESTIMATED);
  }
}

// The training's: mode, micro-batches and steps, numerics.
void ApplyTrainingDefaults(petra::v1::JobSpec* spec) {
  const bool lm_recipe = spec->recipe() == petra::v1::RECIPE_LANGUAGE_MODEL;
  petra::v1::TrainingSpec* train = spec->mutable_training();
  if (train->mode() == petra::v1::TRAINING_MODE_UNSPECIFIED) {
    train->set_mode(petra::v1::TRAINING_MODE_PETRA);
  }
  const bool delayed_mode = train->mode() == petra::v1::TRAINING_MODE_PETRA ||
                            train->mode() == petra::v1::TRAINING_MODE_DELAYED;
  if (train->mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT &&
      train->forward_gradient().guess() ==
          petra::v1::ForwardGradientSpec::GUESS_UNSPECIFIED) {
    train->mutable_forward_gradient()->set_guess(
        petra::v1::ForwardGradientSpec::GUESS_LOCAL);
  }
  // The rebuild's weights, where a stage rebuilds (inputs not stashed):
  // PETRA has only the current ones; a weight stash rebuilds with itself.
  if (train->rebuild_with() ==
      petra::v1::TrainingSpec::REBUILD_WITH_UNSPECIFIED) {
    if (train->mode() == petra::v1::TRAINING_MODE_PETRA) {
      train->set_rebuild_with(petra::v1::TrainingSpec::REBUILD_WITH_CURRENT);
    } else if (train->mode() == petra::v1::TRAINING_MODE_DELAYED &&
               train->stash_weights() && !train->stash_inputs()) {
      train->set_rebuild_with(petra::v1::TrainingSpec::REBUILD_WITH_STASHED);
    }
  }
  // Delayed gradients: the same 64 samples a step in smaller micro-batches
  // cut each stage's delay in steps at about the same speed
  // (docs/DELAY_CORRECTIONS.md). A language model's in micro-batches of 8
  // (revlm, 2 stages: 0.26 bits/byte closer to backprop); a convolutional
  // network's of 16, where BatchNorm still sees enough samples (RevNet18 per
  // block: 11 points closer, the main job 0.5); a vision transformer's of
  // 32, whose stages lose speed below it (RevViT per block: 1.1 points
  // closer at 0.94 of the speed; 16 would be 1.5 closer at 0.81).
  const bool default_recipe = spec->recipe() == petra::v1::RECIPE_DEFAULT;
  const bool transformer_recipe =
      spec->recipe() == petra::v1::RECIPE_TRANSFORMER;
  const bool small_micro_batches =
      (lm_recipe || default_recipe || transformer_recipe) && delayed_mode &&
      !train->has_accumulation_steps() && !train->has_micro_batch_size();
  const uint32_t small_micro_batch = lm_recipe            ? 8
                                     : transformer_recipe ? 32
                                                          : 16;
  // A synchronous pipeline flushes every k micro-batches: by default the
  // recipe's 64 samples a step cut into enough micro-batches to fill it
  // (8 of 8 sequences, else 4 of 16 samples; the bubble of J stages is
  // (J - 1) / (M + J - 1)), and never a flush of one, which is backprop.
  const bool pipeline = train->mode() == petra::v1::TRAINING_MODE_PIPELINE;
  if (pipeline) {
    if (train->pipeline_schedule() ==
        petra::v1::TrainingSpec::PIPELINE_SCHEDULE_UNSPECIFIED) {
      train->set_pipeline_schedule(
          petra::v1::TrainingSpec::PIPELINE_SCHEDULE_1F1B);
    }
    if (!train->has_micro_batch_size()) {
      train->set_micro_batch_size(
          train->has_accumulation_steps()
              ? std::max<uint32_t>(
                    1, 64 / std::max<uint32_t>(1, train->accumulation_steps()))
              : (lm_recipe ? 8 : 16));
    }
    if (!train->has_accumulation_steps()) {
      train->set_accumulation_steps(std::max<uint32_t>(
          2, 64 / std::max<uint32_t>(1, train->micro_batch_size())));
    }
  }
  if (!train->has_accumulation_steps()) {
    train->set_accumulation_steps(small_micro_batches ? 64 / small_micro_batch
                                                      : 1);
  }
  if (!train->has_micro_batch_size()) {
    train->set_micro_batch_size(small_micro_batches ? small_micro_batch : 64);
  }
  if (!train->has_epochs()) train->set_epochs(1);
  if (train->non_finite() ==
      petra::v1::TrainingSpec::NON_FINITE_POLICY_UNSPECIFIED) {
    train->set_non_finite(petra::v1::TrainingSpec::NON_FINITE_POLICY_FAIL);
  }
  if (train->precision() == petra::v1::TrainingSpec::PRECISION_UNSPECIFIED) {
    train->set_precision(petra::v1::TrainingSpec::PRECISION_FP32);
  }
  if (!train->has_rebuild_error_every()) train->set_rebuild_error_every(64);
  if (!train->has_weight_drift_decay()) train->set_weight_drift_decay(0.9);
  if (train->memory_format() ==
      petra::v1::TrainingSpec::MEMORY_FORMAT_UNSPECIFIED) {
    train->set_memory_format(petra::v1::TrainingSpec::MEMORY_FORMAT_AUTO);
  }
  if (train->wire_dtype() == petra::v1::TrainingSpec::WIRE_DTYPE_UNSPECIFIED) {
    train->set_wire_dtype(petra::v1::TrainingSpec::WIRE_DTYPE_FP32);
  }
}

// The optimizer's, from the recipe, the mode and the batch; and whether
// weights are predicted, which the optimizer decides.
void ApplyOptimizerDefaults(petra::v1::JobSpec* spec) {
  const bool lm_recipe = spec->recipe() == petra::v1::RECIPE_LANGUAGE_MODEL;
  petra::v1::TrainingSpec* train = spec->mutable_training();
  const bool delayed_mode = train->mode() == petra::v1::TRAINING_MODE_PETRA ||
                            train->mode() == petra::v1::TRAINING_MODE_DELAYED;
  const bool default_recipe = spec->recipe() == petra::v1::RECIPE_DEFAULT;
  // The recipes built on AdamW, whose step is about the rate whatever the
  // gradient's age.
  const bool adamw_recipe =
      lm_recipe || spec->recipe() == petra::v1::RECIPE_TRANSFORMER;
  petra::v1::OptimizerSpec* opt = spec->mutable_optimizer();
  if (opt->kind() == petra::v1::OptimizerSpec::KIND_UNSPECIFIED) {
    opt->set_kind(adamw_recipe ? petra::v1::OptimizerSpec::KIND_ADAMW
                               : petra::v1::OptimizerSpec::KIND_SGD);
  }
  // AdamW, NAdamW and Muon (on what is not a matrix): Adam's moments,
  // fields and defaults.
  const bool muon = opt->kind() == petra::v1::OptimizerSpec::KIND_MUON;
  const bool adamw = opt->kind() == petra::v1::OptimizerSpec::KIND_ADAMW ||
                     opt->kind() == petra::v1::OptimizerSpec::KIND_NADAMW ||
                     muon;
  if (spec->recipe() == petra::v1::RECIPE_PAPER && !adamw) {
    ApplyPaperRecipe(spec);
  }

  // The effective batch every linear scaling rule reads: one optimizer
  // step's samples over all replicas.
  const double batch = static_cast<double>(train->micro_batch_size()) *
                       train->accumulation_steps() *
                       std::max<uint32_t>(1, spec->replicas());
  if (adamw) {
    // DeiT's values (Recipe, RECIPE_TRANSFORMER), its peak rate refitted;
    // a language model's after GPT-2/3 and nanoGPT (RECIPE_LANGUAGE_MODEL).
    if (!opt->has_learning_rate()) {
      opt->set_learning_rate(lm_recipe
                                 ? 1e-3 * std::sqrt(batch / 64.0)
                                 : kAdamWLearningRatePer64 * batch / 64.0);
    }
    if (!opt->has_weight_decay()) opt->set_weight_decay(lm_recipe ? 0.1 : 0.05);
    // NAdamW: the slow momentum of Ajanthan et al.'s asynchronous runs.
    if (!opt->has_beta1()) {
      opt->set_beta1(
          opt->kind() == petra::v1::OptimizerSpec::KIND_NADAMW ? 0.99 : 0.9);
    }
    if (opt->kind() == petra::v1::OptimizerSpec::KIND_NADAMW &&
        !opt->has_momentum_decay()) {
      opt->set_momentum_decay(0.004);
    }
    if (!opt->has_beta2()) opt->set_beta2(lm_recipe ? 0.95 : 0.999);
    if (!opt->has_eps()) opt->set_eps(1e-8);
    if (lm_recipe && !opt->has_clip_grad_norm()) opt->set_clip_grad_norm(1.0);
    if (muon) {
      // Jordan et al.'s and Liu et al.'s momentum for the matrices.
      if (!opt->has_momentum()) opt->set_momentum(0.95);
      if (!opt->has_nesterov()) opt->set_nesterov(opt->momentum() > 0);
    }
  } else {
    // The paper's scaling rule: 0.1 per 256 samples of effective batch.
    if (!opt->has_learning_rate()) opt->set_learning_rate(0.1 * batch / 256.0);
    if (!opt->has_momentum()) opt->set_momentum(0.9);
    // Nesterov needs momentum; default to it whenever momentum is on.
    if (!opt->has_nesterov()) opt->set_nesterov(opt->momentum() > 0);
    if (!opt->has_weight_decay()) opt->set_weight_decay(5e-4);
  }
  if (!opt->has_clip_grad_norm()) opt->set_clip_grad_norm(0.0);
  if (!train->has_predict_weights()) {
    // Language models and convolutional networks forward at the weights
    // predicted for their gradient's return, where the optimizer gives a
    // direction to predict along (docs/DELAY_CORRECTIONS.md).
    const bool predictable =
        opt->kind() == petra::v1::OptimizerSpec::KIND_ADAMW ||
        opt->kind() == petra::v1::OptimizerSpec::KIND_NADAMW ||
        (opt->kind() == petra::v1::OptimizerSpec::KIND_SGD &&
         opt->momentum() > 0);
    train->set_predict_weights((lm_recipe || default_recipe) && delayed_mode &&
                               predictable);
  }
}

// The learning rate's schedule, from the recipe and the run's length.
void ApplyScheduleDefaults(petra::v1::JobSpec* spec) {
  const bool lm_recipe = spec->recipe() == petra::v1::RECIPE_LANGUAGE_MODEL;
  const bool adamw_recipe =
      lm_recipe || spec->recipe() == petra::v1::RECIPE_TRANSFORMER;
  const petra::v1::TrainingSpec* train = &spec->training();
  petra::v1::ScheduleSpec* sched = spec->mutable_schedule();
  if (!sched->has_warmup_epochs()) {
    if (lm_recipe) {
      // A twentieth of the run (nanoGPT warms up over a fiftieth of its
      // 5000 steps; a short run gets a little more).
      sched->set_warmup_epochs(train->epochs() / 20.0);
    } else if (spec->recipe() == petra::v1::RECIPE_TRANSFORMER) {
      // DeiT's 5 epochs; a third of a shorter run.
      sched->set_warmup_epochs(std::min(5.0, train->epochs() / 3.0));
    } else {
      sched->set_warmup_epochs(train->epochs() < 10 ? 0.0 : 5.0);
    }
  }
  if (sched->decay() == petra::v1::ScheduleSpec::DECAY_UNSPECIFIED) {
    sched->set_decay(petra::v1::ScheduleSpec::DECAY_COSINE);
  }
  if (!sched->has_step_factor()) sched->set_step_factor(0.1);
  if (!sched->has_delay_lr_power()) {
    // Transformers: each stage's rate over 1 + its delay (power 1). AdamW
    // moves every weight by about the rate each step, whatever its
    // gradient's age; measured on RevViT (docs/BENCHMARKS.md, "Delay-scaled
    // rates"): per block 17.8 points behind backprop without, 3.4 with.
    sched->set_delay_lr_power(adamw_recipe ? 1.0 : 0.0);
  }
  if (!sched->has_delay_lr_anneal_epochs()) {
    sched->set_delay_lr_anneal_epochs(0.0);
  }
}

}  // namespace

void ApplyJobSpecDefaults(petra::v1::JobSpec* spec) {
  // In this order: each sub-spec's defaults read those before it (the
  // data's augmentation the model's variant, the optimizer the recipe and
  // the training's batch).
  ApplyModelDefaults(spec);
  ApplyDataDefaults(spec);
  ApplyPartitionDefaults(spec);
  const petra::v1::ModelSpec* model = &spec->model();
  if (spec->recipe() == petra::v1::RECIPE_UNSPECIFIED) {
    spec->set_recipe(catalog::IsLanguageModel(model->architecture())
                         ? petra::v1::RECIPE_LANGUAGE_MODEL
                     : catalog::IsTransformer(model->architecture())
                         ? petra::v1::RECIPE_TRANSFORMER
                         : petra::v1::RECIPE_DEFAULT);
  }
  ApplyTrainingDefaults(spec);
  if (!spec->has_replicas()) spec->set_replicas(1);
  if (spec->transport() == petra::v1::TRANSPORT_UNSPECIFIED) {
    spec->set_transport(petra::v1::TRANSPORT_AUTO);
  }
  ApplyOptimizerDefaults(spec);
  ApplyScheduleDefaults(spec);
  if (!spec->evaluation().has_every_epochs()) {
    spec->mutable_evaluation()->set_every_epochs(1);
  }
  if (!spec->checkpoint().has_every_epochs()) {
    spec->mutable_checkpoint()->set_every_epochs(1);
  }
  if (!spec->checkpoint().has_keep_last()) {
    spec->mutable_checkpoint()->set_keep_last(2);
  }
}

}  // namespace petra::job

// The training mode and its options, the optimizer and the schedule of a
// job spec.
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/base/utf8.h"
#include "services/catalog/architecture_catalog.h"
#include "services/catalog/device_name.h"
#include "services/job/enum_names.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_validation.h"
#include "services/job/spec_checks.h"

namespace petra::job::spec_checks {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::GetEnumDescriptor;

// Mode forward_gradient and its own field, each only with the other.
void CheckForwardGradient(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::TrainingSpec& t = s.training();
  if (t.mode() != petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    if (t.has_forward_gradient()) {
      p.Add("training.forward_gradient", "set",
            absl::StrCat("only valid with mode forward_gradient, not ",
                         EnumShortName(t.mode())));
    }
    return;
  }
  CheckEnum<petra::v1::ForwardGradientSpec::Guess>(
      p, "training.forward_gradient.guess", t.forward_gradient().guess(),
      false);
  const int stages = StageCount(s);
  if (stages == 1) {
    p.Add("training.mode", "forward_gradient",
          "needs 2 or more stages: every stage but the last needs an "
          "auxiliary head on its output, and with one stage there is none "
          "(its exact gradient is plain backprop)");
  }
  if (t.overlap_rebuild()) {
    p.Add("training.overlap_rebuild", "true",
          "forward_gradient rebuilds nothing (there is no backward pass to "
          "overlap)");
  }
  if (t.non_finite() ==
      petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH) {
    p.Add("training.non_finite", "skip_micro_batch",
          "forward_gradient fails on NaN or Inf: a skipped micro-batch would "
          "still move each stage along its guess");
  }
}

// The rebuild's weights: only where a stage rebuilds its input, and only
// weights that exist (a stash for STASHED).
void CheckRebuildWith(const petra::v1::TrainingSpec& t, Problems& p) {
  using petra::v1::TrainingSpec;
  if (!CheckEnum<TrainingSpec::RebuildWith>(p, "training.rebuild_with",
                                            t.rebuild_with(), false) ||
      t.rebuild_with() == TrainingSpec::REBUILD_WITH_UNSPECIFIED) {
    return;
  }
  const std::string value = EnumShortName(t.rebuild_with());
  if (t.mode() != petra::v1::TRAINING_MODE_PETRA &&
      t.mode() != petra::v1::TRAINING_MODE_DELAYED) {
    p.Add("training.rebuild_with", value,
          absl::StrCat("only valid with modes petra and delayed, not ",
                       EnumShortName(t.mode()), " (it rebuilds nothing)"));
  } else if (t.stash_inputs()) {
    p.Add("training.rebuild_with", value,
          "nothing is rebuilt when stash_inputs keeps every input");
  } else if (t.rebuild_with() == TrainingSpec::REBUILD_WITH_STASHED &&
             !t.stash_weights()) {
    p.Add("training.rebuild_with", value,
          "needs stashed weights: mode delayed with stash_weights (petra "
          "keeps none)");
  }
}

// Weight prediction and spike compensation need a delay to act across and
// momentum to act on.
void CheckMomentumCorrection(const petra::v1::JobSpec& s, bool on,
                             const std::string& field, Problems& p) {
  if (!on) return;
  const petra::v1::TrainingMode mode = s.training().mode();
  if (mode != petra::v1::TRAINING_MODE_PETRA &&
      mode != petra::v1::TRAINING_MODE_DELAYED) {
    p.Add(field, "true",
          absl::StrCat("only valid with modes petra and delayed, not ",
                       EnumShortName(mode),
                       " (no delayed gradient to correct for)"));
  } else if (s.optimizer().kind() != petra::v1::OptimizerSpec::KIND_SGD) {
    // Weight prediction reads AdamW's (or NAdamW's) step direction; spike
    // compensation's coefficients are momentum SGD's alone.
    if (field == "training.spike_compensation") {
      p.Add(field, "true",
            "needs optimizer kind sgd: its catch-up is momentum SGD's "
            "(use --predict-weights with adamw)");
    } else if (s.optimizer().kind() == petra::v1::OptimizerSpec::KIND_MUON) {
      p.Add(field, "true",
            "not with optimizer kind muon, whose orthogonalised step no "
            "direction kept predicts (use discrepancy_correction)");
    }
  } else if (s.optimizer().momentum() == 0) {
    p.Add(field, "true",
          "needs optimizer.momentum > 0: it acts through the momentum buffer");
  }
}

// DC-ASGD and PipeMare's discrepancy correction extrapolate the weights'
// drift across a delay.
void CheckDriftCorrections(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::TrainingSpec& t = s.training();
  const bool delayed = t.mode() == petra::v1::TRAINING_MODE_PETRA ||
                       t.mode() == petra::v1::TRAINING_MODE_DELAYED;
  if (!std::isfinite(t.delay_compensation()) || t.delay_compensation() < 0) {
    p.Add("training.delay_compensation", Num(t.delay_compensation()),
          "must be finite and >= 0 (0: off)");
  } else if (t.delay_compensation() > 0 && !delayed) {
    p.Add("training.delay_compensation", Num(t.delay_compensation()),
          absl::StrCat("only valid with modes petra and delayed, not ",
                       EnumShortName(t.mode()),
                       " (no delayed gradient to correct)"));
  }
  if (t.discrepancy_correction()) {
    if (!delayed) {
      p.Add("training.discrepancy_correction", "true",
            absl::StrCat("only valid with modes petra and delayed, not ",
                         EnumShortName(t.mode()),
                         " (no delayed gradient to correct)"));
    } else if (t.stash_weights()) {
      p.Add("training.discrepancy_correction", "true",
            "not with stash_weights: the backward has the forward's "
            "weights already");
    }
  }
  if (!std::isfinite(t.weight_drift_decay()) || t.weight_drift_decay() < 0 ||
      t.weight_drift_decay() >= 1) {
    p.Add("training.weight_drift_decay", Num(t.weight_drift_decay()),
          "must be in [0, 1)");
  }
}

// Mode pipeline and its own fields, each only with the other.
void CheckPipeline(const petra::v1::TrainingSpec& t, Problems& p) {
  using petra::v1::TrainingSpec;
  if (t.mode() != petra::v1::TRAINING_MODE_PIPELINE) {
    if (t.pipeline_schedule() != TrainingSpec::PIPELINE_SCHEDULE_UNSPECIFIED) {
      p.Add("training.pipeline_schedule", EnumShortName(t.pipeline_schedule()),
            absl::StrCat("only valid with mode pipeline, not ",
                         EnumShortName(t.mode())));
    }
    if (t.recompute()) {
      p.Add("training.recompute", "true",
            absl::StrCat("only valid with mode pipeline, not ",
                         EnumShortName(t.mode()),
                         " (modes backprop and petra rebuild already)"));
    }
    return;
  }
  CheckEnum<TrainingSpec::PipelineSchedule>(p, "training.pipeline_schedule",
                                            t.pipeline_schedule(), false);
  if (t.pipeline_schedule() == TrainingSpec::PIPELINE_SCHEDULE_GPIPE &&
      t.max_in_flight() > 0 && t.max_in_flight() < t.accumulation_steps()) {
    p.Add("training.max_in_flight", t.max_in_flight(),
          absl::StrCat("GPipe holds a flush's ", t.accumulation_steps(),
                       " micro-batches (accumulation_steps) in flight: give "
                       "at least that many, or 0 for the default"));
  }
  if (t.overlap_rebuild() && !t.recompute()) {
    p.Add("training.overlap_rebuild", "true",
          "mode pipeline rebuilds only with recompute (without it the "
          "forwards' activations are stored)");
  }
}

}  // namespace

void CheckTraining(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::TrainingSpec& t = s.training();
  if (CheckEnum<petra::v1::TrainingMode>(p, "training.mode", t.mode(), false)) {
    if (t.mode() != petra::v1::TRAINING_MODE_DELAYED) {
      if (t.stash_inputs()) {
        p.Add("training.stash_inputs", "true",
              absl::StrCat("only valid with mode delayed, not ",
                           EnumShortName(t.mode())));
      }
      if (t.stash_weights()) {
        p.Add("training.stash_weights", "true",
              absl::StrCat("only valid with mode delayed, not ",
                           EnumShortName(t.mode())));
      }
    } else if (!t.stash_inputs() && !t.stash_weights()) {
      p.Add("training.mode", "delayed",
            "needs stash_inputs and/or stash_weights (without either it is "
            "mode petra)");
    }
    CheckForwardGradient(s, p);
    CheckPipeline(t, p);
    CheckRebuildWith(t, p);
    CheckMomentumCorrection(s, t.predict_weights(), "training.predict_weights",
                            p);
    CheckMomentumCorrection(s, t.spike_compensation(),
                            "training.spike_compensation", p);
    CheckDriftCorrections(s, p);
    if (t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT &&
        t.end_to_end_every() > 0) {
      p.Add("training.end_to_end_every", t.end_to_end_every(),
            "not with mode forward_gradient, whose estimate the gradient "
            "diagnostic (grad_diagnostics_every) compares with the true "
            "gradient");
    }
  }
  if (t.accumulation_steps() < 1 ||
      t.accumulation_steps() > kMaxAccumulationSteps) {
    p.Add("training.accumulation_steps", t.accumulation_steps(),
          absl::StrCat("must be in [1, ", kMaxAccumulationSteps, "]"));
  }
  if (t.micro_batch_size() < 1 || t.micro_batch_size() > kMaxMicroBatchSize) {
    p.Add("training.micro_batch_size", t.micro_batch_size(),
          absl::StrCat("must be in [1, ", kMaxMicroBatchSize, "]"));
  }
  if (t.epochs() < 1 || t.epochs() > kMaxEpochs) {
    p.Add("training.epochs", t.epochs(),
          absl::StrCat("must be in [1, ", kMaxEpochs, "]"));
  }
  CheckEnum<petra::v1::TrainingSpec::NonFinitePolicy>(p, "training.non_finite",
                                                      t.non_finite(), false);
  if (CheckEnum<petra::v1::TrainingSpec::Precision>(p, "training.precision",
                                                    t.precision(), false) &&
      t.precision() == petra::v1::TrainingSpec::PRECISION_BF16 &&
      t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    p.Add("training.precision", "bf16",
          "not with mode forward_gradient, whose forward-mode derivatives "
          "run in fp32 only; use fp32");
  }
  CheckEnum<petra::v1::TrainingSpec::MemoryFormat>(p, "training.memory_format",
                                                   t.memory_format(), false);
  if (CheckEnum<petra::v1::TrainingSpec::WireDtype>(p, "training.wire_dtype",
                                                    t.wire_dtype(), false) &&
      t.wire_dtype() == petra::v1::TrainingSpec::WIRE_DTYPE_BF16 &&
      t.mode() == petra::v1::TRAINING_MODE_FORWARD_GRADIENT) {
    p.Add("training.wire_dtype", "bf16",
          "not with mode forward_gradient, whose tangents travel in fp32; "
          "use fp32");
  }
}

namespace {

// The transport, against the devices it must carry between.
void CheckTransport(const petra::v1::JobSpec& s, Problems& p) {
  CheckEnum<petra::v1::Transport>(p, "transport", s.transport(), false);
  if (s.transport() == petra::v1::TRANSPORT_CUDA_IPC) {
    // Unset devices are the servers' own: the coordinator checks those.
    for (const std::string& d : s.devices()) {
      if (d.rfind("cuda", 0) != 0) {
        p.Add("transport", "cuda_ipc",
              absl::StrCat("carries device memory from GPU to GPU, and "
                           "devices has \"",
                           d, "\": use auto (docs/DATA_PLANE.md)"));
        break;
      }
    }
  }
}

// The learning rate's schedule, against the run's length.
void CheckSchedule(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::ScheduleSpec& sc = s.schedule();
  const uint32_t epochs = s.training().epochs();
  if (!std::isfinite(sc.warmup_epochs()) || sc.warmup_epochs() < 0 ||
      sc.warmup_epochs() > epochs) {
    p.Add("schedule.warmup_epochs", Num(sc.warmup_epochs()),
          absl::StrCat("must be in [0, training.epochs = ", epochs, "]"));
  }
  if (CheckEnum<petra::v1::ScheduleSpec::Decay>(p, "schedule.decay", sc.decay(),
                                                false)) {
    if (sc.decay() != petra::v1::ScheduleSpec::DECAY_STEP &&
        sc.step_epochs_size() > 0) {
      p.Add("schedule.step_epochs",
            absl::StrCat("[", absl::StrJoin(sc.step_epochs(), ", "), "]"),
            absl::StrCat("only valid with decay step, not ",
                         EnumShortName(sc.decay())));
    }
    if (sc.decay() == petra::v1::ScheduleSpec::DECAY_STEP &&
        sc.step_epochs_size() == 0) {
      p.Add("schedule.step_epochs", "[]",
            "decay step needs at least one epoch");
    }
  }
  for (int i = 0; i < sc.step_epochs_size(); ++i) {
    const uint32_t e = sc.step_epochs(i);
    if (e < 1 || e >= epochs || (i > 0 && e <= sc.step_epochs(i - 1))) {
      p.Add(absl::StrCat("schedule.step_epochs[", i, "]"), e,
            absl::StrCat("must increase and lie in [1, training.epochs = ",
                         epochs, ")"));
    }
  }
  if (!std::isfinite(sc.delay_lr_power()) || sc.delay_lr_power() < 0 ||
      sc.delay_lr_power() > 4) {
    p.Add("schedule.delay_lr_power", Num(sc.delay_lr_power()),
          "must be in [0, 4] (0: every stage at the shared rate)");
  }
  if (!std::isfinite(sc.delay_lr_anneal_epochs()) ||
      sc.delay_lr_anneal_epochs() < 0 || sc.delay_lr_anneal_epochs() > epochs) {
    p.Add("schedule.delay_lr_anneal_epochs", Num(sc.delay_lr_anneal_epochs()),
          absl::StrCat("must be in [0, training.epochs = ", epochs, "]"));
  } else if (sc.delay_lr_anneal_epochs() > 0 && !(sc.delay_lr_power() > 0)) {
    p.Add("schedule.delay_lr_anneal_epochs", Num(sc.delay_lr_anneal_epochs()),
          "anneals schedule.delay_lr_power, which is 0: set both");
  }
  if (!std::isfinite(sc.step_factor()) || sc.step_factor() <= 0 ||
      sc.step_factor() > 1) {
    p.Add("schedule.step_factor", Num(sc.step_factor()), "must be in (0, 1]");
  }
}

}  // namespace

void CheckOptimizerAndSchedule(const petra::v1::JobSpec& s, Problems& p) {
  const petra::v1::OptimizerSpec& o = s.optimizer();
  CheckEnum<petra::v1::Recipe>(p, "recipe", s.recipe(), false);
  CheckTransport(s, p);
  CheckEnum<petra::v1::OptimizerSpec::Kind>(p, "optimizer.kind", o.kind(),
                                            false);
  if (!std::isfinite(o.learning_rate()) || o.learning_rate() < 0) {
    p.Add("optimizer.learning_rate", Num(o.learning_rate()),
          "must be finite and >= 0");
  }
  const bool muon = o.kind() == petra::v1::OptimizerSpec::KIND_MUON;
  const bool adam = o.kind() == petra::v1::OptimizerSpec::KIND_ADAMW ||
                    o.kind() == petra::v1::OptimizerSpec::KIND_NADAMW || muon;
  if (o.kind() != petra::v1::OptimizerSpec::KIND_NADAMW &&
      o.has_momentum_decay()) {
    p.Add("optimizer.momentum_decay", Num(o.momentum_decay()),
          "only valid with optimizer kind nadamw");
  } else if (!std::isfinite(o.momentum_decay()) || o.momentum_decay() < 0) {
    p.Add("optimizer.momentum_decay", Num(o.momentum_decay()),
          "must be finite and >= 0");
  }
  if (adam) {
    if (s.recipe() == petra::v1::RECIPE_PAPER) {
      p.Add("optimizer.kind", EnumShortName(o.kind()),
            "not with recipe paper, whose schedule is fitted to SGD with "
            "momentum (the paper's optimizer); use recipe transformer or "
            "default");
    }
    if (!muon && (o.has_momentum() || o.has_nesterov())) {
      p.Add(o.has_momentum() ? "optimizer.momentum" : "optimizer.nesterov",
            o.has_momentum() ? Num(o.momentum())
                             : (o.nesterov() ? "true" : "false"),
            "only valid with optimizer kinds sgd and muon (AdamW's and "
            "NAdamW's momentum is beta1)");
    }
    for (const auto& [field, v] :
         {std::pair<const char*, double>{"optimizer.beta1", o.beta1()},
          {"optimizer.beta2", o.beta2()}}) {
      if (!std::isfinite(v) || v < 0 || v >= 1) {
        p.Add(field, Num(v), "must be in [0, 1)");
      }
    }
    if (!std::isfinite(o.eps()) || o.eps() <= 0) {
      p.Add("optimizer.eps", Num(o.eps()), "must be finite and > 0");
    }
  } else {
    for (const auto& [field, has, v] :
         {std::tuple<const char*, bool, double>{"optimizer.beta1",
                                                o.has_beta1(), o.beta1()},
          {"optimizer.beta2", o.has_beta2(), o.beta2()},
          {"optimizer.eps", o.has_eps(), o.eps()}}) {
      if (has) {
        p.Add(field, Num(v),
              "only valid with optimizer kinds adamw, nadamw and muon");
      }
    }
  }
  if (!adam || muon) {
    if (!std::isfinite(o.momentum()) || o.momentum() < 0 || o.momentum() >= 1) {
      p.Add("optimizer.momentum", Num(o.momentum()), "must be in [0, 1)");
    }
    if (o.nesterov() && o.momentum() == 0) {
      p.Add("optimizer.nesterov", "true", "needs momentum > 0");
    }
  }
  if (!std::isfinite(o.clip_grad_norm()) || o.clip_grad_norm() < 0) {
    p.Add("optimizer.clip_grad_norm", Num(o.clip_grad_norm()),
          "must be finite and >= 0 (0: no clipping)");
  }
  if (!std::isfinite(o.weight_decay()) || o.weight_decay() < 0) {
    p.Add("optimizer.weight_decay", Num(o.weight_decay()),
          "must be finite and >= 0");
  }
  CheckSchedule(s, p);
}

}  // namespace petra::job::spec_checks

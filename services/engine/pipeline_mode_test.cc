// Mode pipeline (GPipe and 1F1B, stored or recomputed activations) in the
// in-process runner: exact gradients, so the same update as backprop on one
// stage over the same micro-batches.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "services/engine/in_process_runner.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

using petra::v1::TrainingSpec;

// Two optimizer steps of M = 4 micro-batches of 8 (the second step's
// forwards must see the first step's weights).
petra::v1::JobSpec TwoFlushes(petra::v1::TrainingMode mode, int stages) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_variant(petra::v1::VARIANT_MNIST);
  s.mutable_model()->set_width(0.125);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_dataset()->set_synthetic_train_size(2 * 4 * 8);
  s.mutable_dataset()->set_synthetic_test_size(64);
  s.mutable_partition()->set_stage_count(stages);
  s.mutable_training()->set_mode(mode);
  s.mutable_training()->set_micro_batch_size(8);
  s.mutable_training()->set_accumulation_steps(4);
  s.mutable_training()->set_epochs(1);
  s.mutable_optimizer()->set_learning_rate(0.2);
  s.set_seed(11);
  return s;
}

struct KeptState {
  std::map<std::string, torch::Tensor> state;  // every stage's, by name
  std::vector<petra::v1::StageStats> stages;
  std::vector<MemoryStats> memory;  // each stage's
};

// The state after one epoch of `raw`, or before it (`run` false).
KeptState RunAndKeep(const petra::v1::JobSpec& raw, bool run = true) {
  KeptState out;
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(raw);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return out;
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, PETRA_DATA_ROOT, catalog::InputShape(spec->model().variant()));
  EXPECT_TRUE(data.ok()) << data.status();
  RunnerOptions options;
  options.threads_per_stage = 1;
  absl::StatusOr<std::unique_ptr<InProcessRunner>> runner =
      InProcessRunner::Create(*spec, std::move(*data), options);
  EXPECT_TRUE(runner.ok()) << runner.status();
  if (!runner.ok()) return out;
  if (run) {
    absl::StatusOr<EpochReport> r = (*runner)->RunEpoch(1);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.stages = r->stages;
  }
  for (int j = 0; j < (*runner)->stage_count(); ++j) {
    for (const auto& [name, t] : (*runner)->worker(j).NamedState(false)) {
      out.state[name] = t.detach().clone();
    }
    out.memory.push_back((*runner)->worker(j).memory());
  }
  return out;
}

// What the steps moved, against backprop's: the same within float32's
// rounding of a different order of sums.
void ExpectSameSteps(const KeptState& got, const KeptState& want,
                     const KeptState& initial, const std::string& where) {
  ASSERT_EQ(got.state.size(), want.state.size()) << where;
  double moved = 0;
  for (const auto& [name, w] : want.state) {
    ASSERT_EQ(got.state.count(name), 1u) << where << ", " << name;
    const torch::Tensor step = w - initial.state.at(name);
    const double norm = step.norm().item<double>();
    moved += norm;
    EXPECT_LE((got.state.at(name) - w).norm().item<double>(),
              1e-4 * norm + 1e-6)
        << where << ", " << name;
  }
  EXPECT_GT(moved, 0) << where;
}

TEST(PipelineMode, EachScheduleStepsAsBackpropOnTheSameMicroBatches) {
  const KeptState want =
      RunAndKeep(TwoFlushes(petra::v1::TRAINING_MODE_BACKPROP, 1));
  const KeptState initial =
      RunAndKeep(TwoFlushes(petra::v1::TRAINING_MODE_BACKPROP, 1), false);
  for (int stages : {2, 4}) {
    for (auto schedule : {TrainingSpec::PIPELINE_SCHEDULE_GPIPE,
                          TrainingSpec::PIPELINE_SCHEDULE_1F1B}) {
      for (bool recompute : {false, true}) {
        petra::v1::JobSpec s =
            TwoFlushes(petra::v1::TRAINING_MODE_PIPELINE, stages);
        s.mutable_training()->set_pipeline_schedule(schedule);
        s.mutable_training()->set_recompute(recompute);
        const std::string where =
            absl::StrCat(stages, " stages, schedule ", schedule,
                         recompute ? ", recompute" : ", stored");
        const KeptState got = RunAndKeep(s);
        ExpectSameSteps(got, want, initial, where);
        ASSERT_EQ(got.stages.size(), static_cast<size_t>(stages)) << where;
        for (const petra::v1::StageStats& st : got.stages) {
          EXPECT_EQ(st.optimizer_steps(), 2) << where;
          EXPECT_EQ(st.staleness_mean(), 0) << where;
        }
      }
    }
  }
}

// What each keeps between a forward and its backward, as the allocator
// counted it: GPipe's first stage the flush's M graphs, 1F1B's J - j of
// them, and with recompute only the inputs it cannot rebuild.
TEST(PipelineMode, GpipeStoresTheFlush1F1BTheDepthRecomputeOnlyInputs) {
  auto peak = [](TrainingSpec::PipelineSchedule schedule, bool recompute) {
    petra::v1::JobSpec s = TwoFlushes(petra::v1::TRAINING_MODE_PIPELINE, 2);
    s.mutable_training()->set_pipeline_schedule(schedule);
    s.mutable_training()->set_recompute(recompute);
    s.mutable_training()->set_accumulation_steps(8);
    s.mutable_dataset()->set_synthetic_train_size(2 * 8 * 8);
    return RunAndKeep(s).memory;
  };
  const std::vector<MemoryStats> gpipe =
      peak(TrainingSpec::PIPELINE_SCHEDULE_GPIPE, false);
  const std::vector<MemoryStats> one_f_one_b =
      peak(TrainingSpec::PIPELINE_SCHEDULE_1F1B, false);
  const std::vector<MemoryStats> rebuilt =
      peak(TrainingSpec::PIPELINE_SCHEDULE_1F1B, true);
  ASSERT_EQ(gpipe.size(), 2u);
  const int64_t g = gpipe[0].peak_activation_buffer_bytes;
  const int64_t o = one_f_one_b[0].peak_activation_buffer_bytes;
  // 8 graphs against 2, each the same size.
  EXPECT_GT(o, 0);
  EXPECT_NEAR(static_cast<double>(g) / o, 4.0, 0.5);
  // With recompute, stage 0 (whose stem is not reversible) keeps only its
  // inputs: 8 x 28 x 28 floats for each of its 2 micro-batches in flight.
  EXPECT_EQ(rebuilt[0].peak_activation_buffer_bytes, 2 * 8 * 28 * 28 * 4);
  EXPECT_LT(rebuilt[0].peak_activation_buffer_bytes, o / 4);
  // The allocator's peak of the stage's tensors orders them alike.
  EXPECT_GT(gpipe[0].host_tensor_peak_bytes,
            one_f_one_b[0].host_tensor_peak_bytes);
  EXPECT_GT(one_f_one_b[0].host_tensor_peak_bytes,
            rebuilt[0].host_tensor_peak_bytes);
  // So do the peaks inside training passes alone, each within the whole.
  EXPECT_GT(gpipe[0].host_tensor_train_peak_bytes,
            one_f_one_b[0].host_tensor_train_peak_bytes);
  EXPECT_GT(one_f_one_b[0].host_tensor_train_peak_bytes,
            rebuilt[0].host_tensor_train_peak_bytes);
  for (const auto* m : {&gpipe, &one_f_one_b, &rebuilt}) {
    for (const MemoryStats& s : *m) {
      EXPECT_GT(s.host_tensor_train_peak_bytes, 0);
      EXPECT_LE(s.host_tensor_train_peak_bytes, s.host_tensor_peak_bytes);
    }
  }
}

}  // namespace
}  // namespace petra::engine

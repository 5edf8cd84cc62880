// The gRPC fleet against the in-process runner: same spec and seed, same
// losses step by step and the same weights at the end.
#include "client/local_fleet.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "client/job_progress.h"
#include "client/local_fleet_test_support.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/base/paths.h"
#include "services/data/dataset.h"
#include "services/engine/export_input.h"
#include "services/engine/in_process_runner.h"
#include "services/engine/state_file.h"
#include "services/job/job_spec_validation.h"
#include "services/model/device_memory.h"
#include "services/model/network.h"
#include "services/wire/grpc_defaults.h"
#include "tests/support/require_cuda.h"

namespace petra::client {
namespace {

// A small RevViT in place of the RevNet: 16 tokens of 16, 4 blocks.
void UseRevViT(petra::v1::JobSpec& s) {
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVVIT);
  s.mutable_model()->clear_width();
  s.mutable_model()->set_variant(petra::v1::VARIANT_MNIST);
  petra::v1::TransformerSpec* t = s.mutable_model()->mutable_transformer();
  t->set_embed_dim(16);
  t->set_depth(4);
  t->set_heads(2);
  t->set_patch_size(7);
}

// A small RevLM on the embedded corpus: 32 tokens of 32, 2 blocks.
void UseRevLM(petra::v1::JobSpec& s) {
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVLM);
  s.mutable_model()->clear_width();
  s.mutable_dataset()->Clear();
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
  s.mutable_dataset()->set_train_limit(24 * 16);
  s.mutable_dataset()->set_test_limit(32);
  petra::v1::TransformerSpec* t = s.mutable_model()->mutable_transformer();
  t->set_embed_dim(32);
  t->set_depth(2);
  t->set_heads(2);
  t->set_seq_len(32);
}

// Runs `raw` in process and on a fleet of its stage count (times its
// replicas), and expects the same loss for every micro-batch, the same
// exported weights, rebuild errors and end-to-end figures. `device`: every
// stage's, in both runners. `tolerance`: relative, on each micro-batch's loss.
void ExpectSameRun(petra::v1::JobSpec raw, const std::string& device = "cpu",
                   double tolerance = 1e-5) {
  raw.add_devices(device);
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(raw);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const uint64_t steps = spec->training().max_steps();
  // Micro-batches: a step is k of every replica's.
  const uint64_t micro_batches =
      steps * spec->training().accumulation_steps() * spec->replicas();
  const uint32_t stage_count = spec->partition().stage_count();

  // In-process, one intra-op thread per stage like the fleet below.
  absl::StatusOr<data::Splits> data =
      data::LoadForJob(*spec, "", catalog::InputShape(spec->model().variant()));
  ASSERT_TRUE(data.ok()) << data.status();
  // (epoch, micro-batch of the epoch) -> loss.
  std::map<std::pair<int, int64_t>, double> reference;
  std::mutex mu;
  engine::RunnerOptions o;
  o.threads_per_stage = 1;
  o.on_step = [&](const engine::StepReport& r) {
    std::lock_guard<std::mutex> lock(mu);
    reference[{static_cast<int>(r.epoch), r.micro_batch}] = r.loss;
  };
  auto runner = engine::InProcessRunner::Create(*spec, std::move(*data), o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto reports = (*runner)->Run();
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reference.size(), micro_batches);

  // The fleet: a coordinator and three stage servers on loopback.
  ScopedDir dir;
  FleetRun run = RunOnFleet(*spec, dir.path);
  ASSERT_TRUE(run.job.ok()) << run.job.status();
  const petra::v1::Job& end = *run.job;
  ASSERT_EQ(end.state(), petra::v1::JOB_STATE_SUCCEEDED)
      << end.error().message();
  EXPECT_EQ(end.progress().step(), steps);
  // Every process of this fleet sees the same /dev/shm: auto chooses shared
  // memory for every link and the feed, unless the job forced a transport
  // (grpc_bulk is for links between stages: the feed then uses gRPC).
  const petra::v1::Transport used =
      spec->transport() == petra::v1::TRANSPORT_AUTO ||
              spec->transport() == petra::v1::TRANSPORT_UNSPECIFIED
          ? petra::v1::TRANSPORT_SHM
          : spec->transport();
  ASSERT_EQ(end.stages_size(),
            static_cast<int>(spec->replicas() * stage_count));
  for (const petra::v1::StagePlacement& p : end.stages()) {
    if (p.stage_index() + 1 < stage_count) {
      EXPECT_EQ(p.transport_to_next(), used) << p.stage_index();
    }
    if (p.stage_index() == 0) {
      EXPECT_EQ(p.transport_from_feed(), used == petra::v1::TRANSPORT_GRPC_BULK
                                             ? petra::v1::TRANSPORT_GRPC
                                             : used);
    }
  }

  const std::string job_dir = dir.path + "/coordinator/jobs/" + end.id();
  std::ifstream log(job_dir + "/train_log.csv");
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "epoch,micro_batch,step,loss");
  int rows = 0;
  while (std::getline(log, line)) {
    int epoch = 0;
    long long id = 0, step = 0;
    double loss = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%d,%lld,%lld,%lf", &epoch, &id, &step,
                          &loss),
              4)
        << line;
    const std::pair<int, int64_t> key{epoch, id};
    ASSERT_TRUE(reference.count(key)) << line;
    EXPECT_NEAR(loss, reference[key], tolerance * std::max(1.0, reference[key]))
        << "epoch " << epoch << ", micro-batch " << id;
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(micro_batches));

  // The exported weights are the in-process weights after the same steps.
  std::ifstream in(job_dir + "/model.pt", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  absl::StatusOr<engine::NamedTensors> exported =
      engine::DecodeStateFile(bytes);
  ASSERT_TRUE(exported.ok()) << exported.status();
  size_t expected = 0;
  for (int j = 0; j < (*runner)->stage_count(); ++j) {
    for (const auto& [name, t] : (*runner)->worker(j).NamedState(false)) {
      ++expected;
      ASSERT_TRUE(exported->count(name)) << name;
      EXPECT_TRUE(torch::allclose(exported->at(name), t.cpu(), 1e-4, 1e-5))
          << name;
    }
  }
  // Those, and the model's input and network (export_input.h): 6 more.
  EXPECT_EQ(exported->size(), expected + 6);
  EXPECT_TRUE(engine::PreprocessingFromTensors(*exported).ok());

  // The rebuild's measured error is the same on the fleet.
  for (const petra::v1::StageStats& mine : (*runner)->StageStats()) {
    for (const petra::v1::StageStats& fleet : end.progress().stages()) {
      // The in-process runner reports replica 0's stages.
      if (fleet.stage_index() != mine.stage_index() || fleet.replica() != 0)
        continue;
      EXPECT_EQ(fleet.rebuild_error_samples(), mine.rebuild_error_samples())
          << "stage " << mine.stage_index();
      EXPECT_NEAR(fleet.rebuild_error_max(), mine.rebuild_error_max(), 1e-7)
          << "stage " << mine.stage_index();
    }
  }
  // With replicas, every replica's stages report, each averaged as many
  // bytes as the in-process runner's copy of it, and none fell out of step.
  if (spec->replicas() > 1) {
    std::set<std::pair<uint32_t, uint32_t>> seen;
    for (const petra::v1::StageStats& fleet : end.progress().stages()) {
      seen.insert({fleet.replica(), fleet.stage_index()});
      const auto mine = (*runner)->StageStats()[fleet.stage_index()];
      EXPECT_GT(mine.allreduce_bytes(), 0u);
      EXPECT_EQ(fleet.allreduce_bytes(), mine.allreduce_bytes())
          << "replica " << fleet.replica() << " stage " << fleet.stage_index();
      EXPECT_EQ(fleet.replica_mismatches(), 0u);
    }
    EXPECT_EQ(seen.size(), spec->replicas() * stage_count);
  }
  // The end-to-end gradient check, when on, gives each stage the same
  // figures on the fleet.
  for (const petra::v1::StageStats& mine : (*runner)->StageStats()) {
    if (mine.end_to_end_samples() == 0) continue;
    bool found = false;
    for (const petra::v1::StageStats& fleet : end.progress().stages()) {
      if (fleet.stage_index() != mine.stage_index() || fleet.replica() != 0)
        continue;
      found = true;
      EXPECT_EQ(fleet.end_to_end_samples(), mine.end_to_end_samples());
      EXPECT_NEAR(fleet.end_to_end_cosine_similarity(),
                  mine.end_to_end_cosine_similarity(), 1e-4)
          << "stage " << mine.stage_index();
      EXPECT_NEAR(fleet.end_to_end_norm_ratio(), mine.end_to_end_norm_ratio(),
                  1e-4)
          << "stage " << mine.stage_index();
    }
    EXPECT_TRUE(found) << "stage " << mine.stage_index();
  }
  // A check that was asked for did measure something, so the comparisons
  // above compared numbers.
  int64_t rebuilds = 0, end_to_end = 0;
  for (const petra::v1::StageStats& mine : (*runner)->StageStats()) {
    rebuilds += mine.rebuild_error_samples();
    end_to_end += mine.end_to_end_samples();
  }
  if (spec->training().rebuild_error_every() == 1) {
    EXPECT_GT(rebuilds, 0);
  }
  if (spec->training().end_to_end_every() > 0) {
    EXPECT_GT(end_to_end, 0);
  }
}

// Loss for loss on every transport this machine has and in every mode,
// one test each; the job features ride on them (docs/TESTS.md says which
// test guards what). Auto chooses shared memory on one machine (the test
// checks that it did); two epochs in one pass keep the pipeline full across
// the boundary (nothing evaluated or saved between them); the end-to-end
// gradient check's pass runs on the fleet as in-process.
TEST(LocalFleet, PetraMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  s.mutable_dataset()->set_synthetic_train_size(12 * 16);
  s.mutable_training()->set_epochs(2);
  s.mutable_evaluation()->set_every_epochs(2);
  s.mutable_checkpoint()->set_every_epochs(0);
  s.mutable_training()->set_end_to_end_every(5);
  ExpectSameRun(s);
}

// gRPC: the bytes in the stream's messages. training.wire_dtype bf16: both
// runners hand on the same rounded tensors (half the bytes on the wire).
// training.memory_format channels_last: in process the stages hand each
// other channels_last tensors, over the wire they go as NCHW and each
// stage puts what it receives in its layout. training.precision bf16: every
// stage server runs its blocks under bf16 autocast on its executor's
// thread, as the in-process stage does.
// Replicas: two copies of a two-stage PETRA pipeline on four stage
// servers, each stage averaging its gradients with its copy through the
// coordinator's c10d store, loss for loss as the in-process runner's two
// copies; the export is replica 0's, and every replica's stages report.
TEST(LocalFleet, ReplicatedPetraMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA, 12);
  s.mutable_partition()->set_stage_count(2);
  s.set_replicas(2);
  ExpectSameRun(s);
}

TEST(LocalFleet, PetraOverGrpcMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  s.set_transport(petra::v1::TRANSPORT_GRPC);
  s.mutable_training()->set_wire_dtype(
      petra::v1::TrainingSpec::WIRE_DTYPE_BF16);
  s.mutable_training()->set_memory_format(
      petra::v1::TrainingSpec::MEMORY_FORMAT_CHANNELS_LAST);
  s.mutable_training()->set_precision(petra::v1::TrainingSpec::PRECISION_BF16);
  ExpectSameRun(s);
}

// The bulk gRPC channel beside the streams, with bf16 blocks in NCHW.
TEST(LocalFleet, PetraOverTheBulkGrpcChannelMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  s.set_transport(petra::v1::TRANSPORT_GRPC_BULK);
  s.mutable_training()->set_precision(petra::v1::TrainingSpec::PRECISION_BF16);
  ExpectSameRun(s);
}

// Weight prediction and spike compensation travel in the spec: every stage
// server predicts, and steps with its own delay's coefficients, as the
// in-process stage does (SGD here; AdamW's prediction in the RevViT test).
TEST(LocalFleet, PredictedWeightsAndSpikeCompensationMatchTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  s.mutable_training()->set_predict_weights(true);
  s.mutable_training()->set_spike_compensation(true);
  ExpectSameRun(s);
}

// The delay corrections of issue 67 travel in the spec too: NAdamW's
// look-ahead (Ajanthan et al. 2025), DC-ASGD's gradient correction and
// PipeMare's discrepancy correction, with their state (the weights' drift,
// the mean square) kept per stage server as in process.
TEST(LocalFleet, DelayCorrectionsMatchTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  UseRevLM(s);
  s.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_NADAMW);
  s.mutable_training()->set_delay_compensation(0.5);
  s.mutable_training()->set_discrepancy_correction(true);
  ExpectSameRun(s);
}

// Muon on a convolutional network: every convolution's weight stepped as
// the matrix of its output channels by the rest, on each stage server as in
// process.
TEST(LocalFleet, MuonMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  s.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_MUON);
  ExpectSameRun(s);
}

// A transformer through the same fleet, streams, export and all: nothing in
// them knows the blocks are RevViT's (16 tokens of 16, 4 blocks). It trains
// with AdamW (the transformer recipe), whose state each stage server keeps
// and whose moments its weight prediction reads, as the in-process stage
// does; its rebuilding middle stage runs bf16 autocast on its rebuild
// helper's thread too (overlap_rebuild), and the rebuild error, measured on
// every micro-batch, agrees.
TEST(LocalFleet, RevViTMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  UseRevViT(s);
  s.mutable_training()->set_predict_weights(true);
  s.mutable_training()->set_precision(petra::v1::TrainingSpec::PRECISION_BF16);
  s.mutable_training()->set_rebuild_error_every(1);
  s.mutable_training()->set_overlap_rebuild(true);
  ExpectSameRun(s);
}

// A language model (issue 50): token ids into the first stage, a label per
// token into the last, every link's tensors and the rebuild as RevViT's.
TEST(LocalFleet, RevLMMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PETRA);
  UseRevLM(s);
  s.mutable_training()->set_rebuild_error_every(1);
  ExpectSameRun(s);
}

TEST(LocalFleet, BackpropMatchesTheInProcessRunner) {
  ExpectSameRun(SmallJob(petra::v1::TRAINING_MODE_BACKPROP));
}

// The synchronous pipelines (issue 68): GPipe with its activations stored
// (every forward of a flush of 32 before the first backward, so the credit
// window, 2J = 6 at micro-batches of 32, must widen to the flush for the
// last stage's backwards), and 1F1B with them rebuilt, over gRPC, with
// max_in_flight 1: the flush's order and the steps at its end are the same
// on the fleet as in process.
TEST(LocalFleet, GpipeMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PIPELINE, 2, 32);
  s.mutable_training()->set_pipeline_schedule(
      petra::v1::TrainingSpec::PIPELINE_SCHEDULE_GPIPE);
  s.mutable_training()->set_accumulation_steps(32);
  ExpectSameRun(s);
}

TEST(LocalFleet, OneFOneBWithRecomputeMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_PIPELINE, 6, 8);
  s.mutable_training()->set_recompute(true);
  s.mutable_training()->set_accumulation_steps(4);
  s.mutable_training()->set_max_in_flight(1);
  s.set_transport(petra::v1::TRANSPORT_GRPC);
  ExpectSameRun(s);
}

// Forward gradients: tangents and labels up, directional derivatives down,
// the auxiliary heads beside the stages; the random guess also shows that
// each stage draws the same directions in either runner.
TEST(LocalFleet, ForwardGradientMatchesTheInProcessRunner) {
  ExpectSameRun(SmallJob(petra::v1::TRAINING_MODE_FORWARD_GRADIENT));
}

TEST(LocalFleet, RandomGuessForwardGradientMatchesTheInProcessRunner) {
  petra::v1::JobSpec s = SmallJob(petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
  s.mutable_training()->mutable_forward_gradient()->set_guess(
      petra::v1::ForwardGradientSpec::GUESS_RANDOM);
  s.mutable_optimizer()->set_learning_rate(0.001);
  ExpectSameRun(s);
}

// On a GPU: every stage on it in both runners. With deterministic cuDNN and
// no TF32 both run the same kernels on the same values, so what remains is
// the order of floating-point sums inside kernels that may use atomics;
// 1e-4 relative over 50 steps leaves room for that and no more.
TEST(GpuLocalFleet, PetraMatchesTheInProcessRunnerOnCudaForFiftySteps) {
  PETRA_REQUIRE_CUDA();
  test_support::UseExactGpuMath();
  ExpectSameRun(FiftySteps(petra::v1::TRAINING_MODE_PETRA), "cuda", 1e-4);
}

// A job too big for the GPU fails with the stage and the cause in one line,
// and the same stage servers then train the next job.
TEST(GpuLocalFleet, OutOfDeviceMemoryFailsTheJobAndTheServersStay) {
  PETRA_REQUIRE_CUDA();
  auto submit = [](petra::v1::CoordinatorService::Stub& stub,
                   petra::v1::JobSpec spec) -> absl::StatusOr<petra::v1::Job> {
    spec.add_devices("cuda");
    grpc::ClientContext context;
    petra::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    petra::v1::Job job;
    grpc::Status s = stub.SubmitJob(&context, request, &job);
    if (!s.ok()) return absl::InternalError(s.error_message());
    ProgressPrinter quiet(true);
    return FollowJob(stub, job.id(), quiet);
  };
  ScopedDir dir;
  LocalFleet::Options options;
  options.stages = 3;
  options.data_root = dir.path;
  options.state_dir = dir.path;
  options.devices = {"cuda", "cuda", "cuda"};
  auto fleet = LocalFleet::Start(options);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  auto stub = petra::v1::CoordinatorService::NewStub(
      wire::CreateChannel((*fleet)->coordinator_address()));

  petra::v1::JobSpec big = FiftySteps(petra::v1::TRAINING_MODE_PETRA);
  big.mutable_training()->set_max_steps(2);
  big.mutable_training()->set_micro_batch_size(16384);  // ~400 MB a stage
  big.mutable_dataset()->set_synthetic_train_size(32768);
  // Before any stage has used the GPU in this process.
  absl::Status capped = model::LimitDeviceMemory("cuda", 0.002);
  ASSERT_TRUE(capped.ok()) << capped;
  absl::StatusOr<petra::v1::Job> failed = submit(*stub, big);
  capped = model::LimitDeviceMemory("cuda", 1.0);
  ASSERT_TRUE(capped.ok()) << capped;
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), petra::v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed->error().message(),
              ::testing::HasSubstr("out of device memory"));
  EXPECT_THAT(failed->error().message(), ::testing::HasSubstr("stage "));
  EXPECT_LT(failed->error().message().size(), 1000u);

  petra::v1::JobSpec small = FiftySteps(petra::v1::TRAINING_MODE_PETRA);
  small.mutable_training()->set_max_steps(2);
  absl::StatusOr<petra::v1::Job> next = submit(*stub, small);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->state(), petra::v1::JOB_STATE_SUCCEEDED)
      << next->error().message();
  (*fleet)->Stop();
}

}  // namespace
}  // namespace petra::client

// The gRPC fleet against the in-process runner: same spec and seed, same
// losses step by step and the same weights at the end.
#include "client/local_fleet.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "client/job_progress.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/data/dataset.h"
#include "services/engine/in_process_runner.h"
#include "services/engine/state_file.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/wire/grpc_defaults.h"

namespace petra::client {
namespace {

struct ScopedDir {
  ScopedDir() {
    std::string p = "/tmp/petra-fleet-test-XXXXXX";
    path = mkdtemp(p.data());
  }
  ~ScopedDir() { std::filesystem::remove_all(path); }
  std::string path;
};

petra::v1::JobSpec FiftySteps(petra::v1::TrainingMode mode) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.125);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_dataset()->set_synthetic_test_size(256);
  s.mutable_partition()->set_stage_count(3);
  s.mutable_training()->set_mode(mode);
  s.mutable_training()->set_max_steps(50);
  s.mutable_training()->set_epochs(1);
  s.mutable_evaluation()->set_every_epochs(1);
  s.set_seed(7);
  return s;
}

void ExpectSameRun(petra::v1::TrainingMode mode) {
  absl::StatusOr<petra::v1::JobSpec> spec =
      job::ResolveJobSpec(FiftySteps(mode));
  ASSERT_TRUE(spec.ok()) << spec.status();

  // In-process, one intra-op thread per stage like the fleet below.
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, "/usr/share/datasets", model::InputShape(spec->model().variant()));
  ASSERT_TRUE(data.ok()) << data.status();
  std::map<int64_t, double> reference;
  std::mutex mu;
  engine::RunnerOptions o;
  o.threads_per_stage = 1;
  o.on_step = [&](const engine::StepReport& r) {
    std::lock_guard<std::mutex> lock(mu);
    reference[r.micro_batch] = r.loss;
  };
  auto runner = engine::InProcessRunner::Create(*spec, std::move(*data), o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto reports = (*runner)->Run();
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reference.size(), 50u);

  // The fleet: a coordinator and three stage servers on loopback.
  ScopedDir dir;
  auto fleet = LocalFleet::Start({3, 1, "/usr/share/datasets", dir.path});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  auto stub = petra::v1::CoordinatorService::NewStub(
      wire::CreateChannel((*fleet)->coordinator_address()));
  grpc::ClientContext context;
  petra::v1::SubmitJobRequest request;
  *request.mutable_spec() = *spec;
  petra::v1::Job job;
  ASSERT_TRUE(stub->SubmitJob(&context, request, &job).ok());
  ProgressPrinter quiet(true);
  absl::StatusOr<petra::v1::Job> end = FollowJob(*stub, job.id(), quiet);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), petra::v1::JOB_STATE_SUCCEEDED)
      << end->error().message();
  EXPECT_EQ(end->progress().step(), 50u);

  const std::string job_dir = dir.path + "/coordinator/jobs/" + job.id();
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
    ASSERT_TRUE(reference.count(id)) << line;
    EXPECT_NEAR(loss, reference[id], 1e-5 * std::max(1.0, reference[id]))
        << "micro-batch " << id;
    ++rows;
  }
  EXPECT_EQ(rows, 50);

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
      EXPECT_TRUE(torch::allclose(exported->at(name), t, 1e-4, 1e-5)) << name;
    }
  }
  EXPECT_EQ(exported->size(), expected);
  (*fleet)->Stop();
}

TEST(LocalFleet, PetraMatchesTheInProcessRunnerForFiftySteps) {
  ExpectSameRun(petra::v1::TRAINING_MODE_PETRA);
}

TEST(LocalFleet, BackpropMatchesTheInProcessRunnerForFiftySteps) {
  ExpectSameRun(petra::v1::TRAINING_MODE_BACKPROP);
}

}  // namespace
}  // namespace petra::client

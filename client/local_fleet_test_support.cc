#include "client/local_fleet_test_support.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <algorithm>

#include "client/job_progress.h"
#include "client/local_fleet.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/base/paths.h"
#include "services/job/job_spec_validation.h"
#include "services/wire/grpc_defaults.h"

namespace petra::client {

ScopedDir::ScopedDir() {
  std::string p = "/tmp/petra-fleet-test-XXXXXX";
  path = mkdtemp(p.data());
}

ScopedDir::~ScopedDir() { petra::base::RemoveTree(path).IgnoreError(); }

petra::v1::JobSpec SmallJob(petra::v1::TrainingMode mode, uint32_t steps,
                            uint32_t micro_batch) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.125);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_dataset()->set_synthetic_test_size(64);
  s.mutable_partition()->set_stage_count(3);
  s.mutable_training()->set_mode(mode);
  s.mutable_training()->set_micro_batch_size(micro_batch);
  s.mutable_training()->set_max_steps(steps);
  s.mutable_training()->set_epochs(1);
  s.mutable_evaluation()->set_every_epochs(1);
  s.set_seed(7);
  return s;
}

petra::v1::JobSpec FiftySteps(petra::v1::TrainingMode mode) {
  petra::v1::JobSpec s = SmallJob(mode, 50, 64);
  s.mutable_dataset()->set_synthetic_test_size(256);
  return s;
}

FleetRun RunOnFleet(const petra::v1::JobSpec& spec, const std::string& dir) {
  FleetRun run;
  LocalFleet::Options options;
  const int stages = static_cast<int>(spec.partition().stage_count());
  options.stages = stages * static_cast<int>(std::max(1u, spec.replicas()));
  options.data_root = dir;
  options.state_dir = dir;
  for (int k = 0; k < options.stages; ++k) {
    options.devices.push_back(job::DeviceForStage(spec, k % stages));
  }
  auto fleet = LocalFleet::Start(options);
  if (!fleet.ok()) {
    run.job = fleet.status();
    return run;
  }
  auto stub = petra::v1::CoordinatorService::NewStub(
      wire::CreateChannel((*fleet)->coordinator_address()));
  grpc::ClientContext context;
  petra::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  petra::v1::Job job;
  grpc::Status s = stub->SubmitJob(&context, request, &job);
  if (!s.ok()) {
    run.job = absl::InternalError(s.error_message());
    return run;
  }
  ProgressPrinter quiet(true);
  run.job = FollowJob(*stub, job.id(), quiet);
  run.epochs = quiet.epochs();
  (*fleet)->Stop();
  return run;
}

}  // namespace petra::client

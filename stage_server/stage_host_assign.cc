// StageHost's Assign: a job's stage checked, built (and restored from a
// checkpoint, and joined to its replicas) on the stage's executor.
#include <algorithm>
#include <climits>
#include <filesystem>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"
#include "services/base/secret_key.h"
#include "services/catalog/device_name.h"
#include "services/engine/job_plan.h"
#include "services/engine/memory_estimate.h"
#include "services/engine/stage_worker.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/model/network_summary.h"
#include "stage_server/stage_host.h"
#include "stage_server/stage_host_internal.h"
#include "stage_server/stage_job.h"

namespace petra::stage_server {

namespace {

// How long a stage waits for its copies in the other replicas: to join
// the group at Assign, and at each all-reduce. A replica that stopped (its
// pass failed, its server was released or died) ends the others' waits
// sooner: Gloo sees its connections close.
constexpr std::chrono::milliseconds kReplicaTimeout{60000};

// Joins the stage's replica group that the Assign names (every copy of the
// stage joins at its own Assign; the coordinator assigns them all at once).
absl::StatusOr<std::unique_ptr<engine::GradientAverager>> JoinReplicas(
    const petra::v1::ReplicaAssignment& r) {
  absl::StatusOr<base::HostPort> store =
      base::SplitHostPort(r.store_address(), "replica.store_address");
  if (!store.ok()) return store.status();
  return engine::JoinReplicaGroup(
      store->host, store->port, r.group(), static_cast<int>(r.index()),
      static_cast<int>(r.count()), r.local_host(), kReplicaTimeout);
}

// An Assign's checks that need nothing of the stage's state: the job id,
// the spec, the partition and this stage's place in it, the data keys,
// the replica group and the device. The spec resolved and the ranges.
struct CheckedAssign {
  petra::v1::JobSpec spec;
  std::vector<model::BlockRange> ranges;
};
absl::StatusOr<CheckedAssign> CheckAssign(
    const petra::v1::AssignRequest& request, const std::string& server_device) {
  if (absl::Status s = CheckRelativeName(request.job_id(), "job_id"); !s.ok())
    return s;
  // A job id names one directory under --state-dir, not a path.
  if (absl::StrContains(request.job_id(), "/") || request.job_id() == ".") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job_id \"", request.job_id(), "\" must be one path component"));
  }
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(request.spec());
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: ", spec.status().message()));
  }
  const uint32_t count = request.stage_count();
  if (count < 1 || request.stage_index() >= count ||
      request.partition_size() != static_cast<int>(count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage_index ", request.stage_index(), ", stage_count ",
                     count, " and a partition of ", request.partition_size(),
                     " ranges do not fit together"));
  }
  // Every range is checked against the network before anything looks a
  // block up by it (a range past the end once crashed the memory estimate).
  std::vector<model::BlockRange> ranges;
  for (const petra::v1::LayerRange& r : request.partition()) {
    ranges.push_back(
        {static_cast<int>(std::min<uint32_t>(r.begin(), INT32_MAX)),
         static_cast<int>(std::min<uint32_t>(r.end(), INT32_MAX))});
  }
  absl::StatusOr<model::NetworkBlueprint> net =
      model::DescribeNetwork(spec->model());
  if (!net.ok()) return net.status();
  if (absl::Status s = model::CheckCovers(ranges, net->size()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("partition: ", s.message()));
  }
  const petra::v1::LayerRange& own =
      request.partition(static_cast<int>(request.stage_index()));
  if (request.layers().begin() != own.begin() ||
      request.layers().end() != own.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layers [", request.layers().begin(), ", ", request.layers().end(),
        ") are not stage ", request.stage_index(),
        "'s range in the partition [", own.begin(), ", ", own.end(), ")"));
  }
  // The keys of the job's data streams: this stage's, and its
  // neighbours' that it presents to them.
  const bool has_next = request.stage_index() + 1 < count;
  const bool has_previous = request.stage_index() > 0;
  for (const auto& [field, key, needed] :
       {std::tuple<const char*, const std::string*, bool>{
            "data_key", &request.data_key(), true},
        {"next_data_key", &request.next_data_key(), has_next},
        {"previous_data_key", &request.previous_data_key(), has_previous}}) {
    if (needed ? !base::IsSecretKey(*key) : !key->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          needed ? " must be 64 lowercase hex digits (the coordinator draws "
                   "one for each stage at each Assign)"
                 : " must be empty: the stage has no such neighbour"));
    }
  }
  if (request.steps_per_epoch() < 1) {
    return absl::InvalidArgumentError("steps_per_epoch must be >= 1");
  }
  if (const petra::v1::ReplicaAssignment& r = request.replica();
      r.count() > 1 &&
      (r.index() >= r.count() || r.group().empty() || r.local_host().empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica: index ", r.index(), " of ", r.count(),
                     ", group \"", r.group(), "\" and local_host \"",
                     r.local_host(), "\" do not name a place in a group"));
  }
  // A job that names no device runs where the server was started to run.
  if (!request.device().empty() &&
      !catalog::DeviceServes(server_device, request.device())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job places stage ", request.stage_index(), " on \"",
        request.device(), "\" but this server runs on \"", server_device,
        "\" (leave the job's devices unset to use each server's own)"));
  }
  return CheckedAssign{*std::move(spec), std::move(ranges)};
}

}  // namespace

void StageHost::Assign(const petra::v1::AssignRequest& request,
                       petra::v1::AssignResponse* response, Done done) {
  auto refuse = [&](absl::Status s) { done(std::move(s)); };
  absl::StatusOr<CheckedAssign> checked = CheckAssign(request, options_.device);
  if (!checked.ok()) return refuse(checked.status());
  std::filesystem::path restore_file;
  if (!request.restore_checkpoint().empty()) {
    absl::StatusOr<std::filesystem::path> file =
        checkpoints_.RestoreFile(request.restore_checkpoint());
    if (!file.ok()) return refuse(file.status());
    restore_file = std::move(*file);
  }
  auto job = std::make_shared<StageJob>(request, options_.device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) {
      return refuse(absl::UnavailableError(host_internal::kDraining));
    }
    if (job_ != nullptr) {
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("this stage already holds job \"", job_->id(),
                       "\"; release it first")));
    }
    job_ = job;
  }
  Post([this, job, spec = std::move(checked->spec),
        ranges = std::move(checked->ranges), restore_file, response,
        done = std::move(done)] {
    // Before the stage is built: its weights arrive on the stream that
    // computes with them.
    job->transfer.UseComputeStreamOnThisThread();
    absl::Status status = CheckFits(spec, ranges, job->index());
    absl::StatusOr<std::vector<std::unique_ptr<engine::StageWorker>>> w =
        status.ok() ? engine::BuildStageWorkers(
                          spec, ranges,
                          static_cast<int64_t>(job->assign.steps_per_epoch()),
                          {job->index()}, options_.device)
                    : status;
    status = w.status();
    if (status.ok() && job->assign.replica().count() > 1) {
      absl::StatusOr<std::unique_ptr<engine::GradientAverager>> group =
          JoinReplicas(job->assign.replica());
      if (group.ok()) {
        job->replicas = std::move(*group);
        w->front()->set_gradient_averager(job->replicas.get());
      }
      status = group.status();
    }
    if (status.ok()) {
      job->worker = std::move(w->front());
      if (!restore_file.empty()) {
        status = StageCheckpoints::RestoreFrom(
            restore_file, job->assign.restore_checkpoint(), *job);
      }
    }
    if (status.ok()) {
      PETRA_LOG_EVENT(
          kInfo, "job_assigned", {"job_id", job->id()},
          {"stage", absl::StrCat(job->index())},
          {"stages", absl::StrCat(job->count())},
          {"blocks", absl::StrCat(job->assign.layers().begin(), "-",
                                  job->assign.layers().end() - 1)},
          {"device", options_.device},
          {"restored_from", job->assign.restore_checkpoint().empty()
                                ? "-"
                                : job->assign.restore_checkpoint()});
    } else {
      PETRA_LOG_EVENT(kWarning, "job_refused", {"job_id", job->id()},
                      {"stage", absl::StrCat(job->index())},
                      {"reason", std::string(status.message())});
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) {
      if (job_ == job) job_.reset();
    } else {
      int64_t params = 0;
      for (const torch::Tensor& p : job->worker->parameters())
        params += p.numel();
      response->set_parameter_count(static_cast<uint64_t>(params));
      response->set_device(options_.device);
      *response->mutable_memory() =
          host_internal::MemoryWithRss(job->worker->memory());
    }
    done(status);
  });
}

absl::Status StageHost::CheckFits(const petra::v1::JobSpec& spec,
                                  const std::vector<model::BlockRange>& ranges,
                                  int stage) {
  const model::MemoryCapacity& capacity = Capacity();
  if (capacity.bytes <= 0) return absl::OkStatus();  // nothing to go by
  try {
    absl::StatusOr<model::NetworkBlueprint> net =
        model::DescribeNetwork(spec.model());
    if (!net.ok()) return net.status();
    const engine::StageMemoryEstimate e = engine::EstimateStageMemory(
        spec, model::SummarizeBlocks(*net), ranges, stage, net->input_shape);
    if (e.total() <= capacity.bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        engine::DoesNotFit(stage, e, capacity.bytes, capacity.source, spec));
  } catch (const std::exception&) {
    // Measuring the network (a block at a time) failed: the build proper
    // will say why.
    return absl::OkStatus();
  }
}

}  // namespace petra::stage_server

#include "stage_server/stage_host.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"
#include "services/engine/job_plan.h"
#include "services/engine/memory_estimate.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker.h"
#include "services/engine/training_mode.h"
#include "services/job/job_spec_validation.h"
#include "services/link/channel_factory.h"
#include "services/metrics/process_memory.h"
#include "services/model/compute_threads.h"
#include "services/model/device_memory.h"
#include "services/model/device_name.h"
#include "services/model/network.h"
#include "services/model/network_summary.h"
#include "services/version.h"
#include "services/wire/status_map.h"
#include "stage_server/neighbor_links.h"
#include "stage_server/stage_job.h"

namespace petra::stage_server {

using petra::v1::StageStatus;

namespace {

// UNAVAILABLE, as gRPC answers a server that is shutting down: the caller
// may try again elsewhere or once the server has restarted.
constexpr char kDraining[] =
    "the stage server is draining: it takes no new work before it stops";

// Memory as the wire carries it, with this process's resident set.
petra::v1::MemoryBreakdown MemoryWithRss(const engine::MemoryStats& m) {
  petra::v1::MemoryBreakdown p = engine::ToProto(m);
  p.set_process_rss_bytes(metrics::ProcessRssBytes());
  return p;
}

// Starts a received payload's copy to the stage's device now, while the
// stage computes the micro-batch before it (nothing to copy on the CPU).
template <typename Payload>
absl::StatusOr<engine::Transfer> StartCopy(const StageJob& job,
                                           Payload& payload) {
  if (!job.transfer.on_device()) return engine::Transfer();
  absl::StatusOr<engine::Transfer> copy = job.transfer.ToDevice(
      wire::TensorsOf(payload), payload.header.micro_batch_id);
  if (copy.ok()) payload.home = model::TensorHome::kDevice;
  return copy;
}

// The stage loop of the pass's phase.
absl::Status RunPhase(StageJob& job, const PassInfo& pass,
                      engine::StageOutbox& outbox) {
  return engine::RunStagePass(
      *job.worker, job.mailbox, outbox, pass.phase, pass.micro_batches,
      engine::PlanMode(job.assign.spec().training()).schedule);
}

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

}  // namespace

StageHost::StageHost(Options options)
    : options_(std::move(options)),
      metrics_(options_.metrics != nullptr ? options_.metrics : &no_metrics_),
      checkpoints_(options_.state_dir),
      // Intra-op threads are per calling thread: the stage's torch work all
      // runs on the executor.
      executor_(std::make_unique<engine::SerialExecutor>(
          [threads = std::max(1, options_.threads)] {
            model::SetComputeThreads(threads);
          })),
      io_(std::make_unique<engine::SerialExecutor>()) {}

StageHost::~StageHost() {
  AbandonJob("the stage server is stopping");
  // Runs what is queued, then stops: the executor before the I/O thread.
  executor_.reset();
  io_.reset();
}

void StageHost::Post(std::function<void()> task) {
  executor_->Post(std::move(task));
}

std::shared_ptr<StageJob> StageHost::CurrentJob(const std::string& id,
                                                absl::Status* error) {
  if (job_ == nullptr || job_->id() != id) {
    *error = absl::NotFoundError(absl::StrCat(
        "unknown job \"", id, "\": ",
        job_ == nullptr
            ? std::string("this stage holds no job")
            : absl::StrCat("this stage holds job \"", job_->id(), "\"")));
    return nullptr;
  }
  return job_;
}

void StageHost::Assign(const petra::v1::AssignRequest& request,
                       petra::v1::AssignResponse* response, Done done) {
  absl::Status bad;
  auto refuse = [&](absl::Status s) { done(std::move(s)); };
  if (absl::Status s = CheckRelativeName(request.job_id(), "job_id"); !s.ok())
    return refuse(s);
  // A job id names one directory under --state-dir, not a path.
  if (absl::StrContains(request.job_id(), "/") || request.job_id() == ".") {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        "job_id \"", request.job_id(), "\" must be one path component")));
  }
  absl::StatusOr<petra::v1::JobSpec> spec = job::ResolveJobSpec(request.spec());
  if (!spec.ok()) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("spec: ", spec.status().message())));
  }
  const uint32_t count = request.stage_count();
  if (count < 1 || request.stage_index() >= count ||
      request.partition_size() != static_cast<int>(count)) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("stage_index ", request.stage_index(), ", stage_count ",
                     count, " and a partition of ", request.partition_size(),
                     " ranges do not fit together")));
  }
  if (request.steps_per_epoch() < 1) {
    return refuse(absl::InvalidArgumentError("steps_per_epoch must be >= 1"));
  }
  if (const petra::v1::ReplicaAssignment& r = request.replica();
      r.count() > 1 &&
      (r.index() >= r.count() || r.group().empty() || r.local_host().empty())) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("replica: index ", r.index(), " of ", r.count(),
                     ", group \"", r.group(), "\" and local_host \"",
                     r.local_host(), "\" do not name a place in a group")));
  }
  // A job that names no device runs where the server was started to run.
  if (!request.device().empty() &&
      !model::DeviceServes(options_.device, request.device())) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        "the job places stage ", request.stage_index(), " on \"",
        request.device(), "\" but this server runs on \"", options_.device,
        "\" (leave the job's devices unset to use each server's own)")));
  }
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
      return refuse(absl::UnavailableError(kDraining));
    }
    if (job_ != nullptr) {
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("this stage already holds job \"", job_->id(),
                       "\"; release it first")));
    }
    job_ = job;
  }
  Post([this, job, spec = *spec, restore_file, response,
        done = std::move(done)] {
    // Before the stage is built: its weights arrive on the stream that
    // computes with them.
    job->transfer.UseComputeStreamOnThisThread();
    std::vector<model::BlockRange> ranges;
    for (const auto& r : job->assign.partition()) {
      ranges.push_back(
          {static_cast<int>(r.begin()), static_cast<int>(r.end())});
    }
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
      job->mailbox.set_wait_observer(
          [m = metrics_, j = job->index()](bool backward, double seconds) {
            m->Waited(j, backward, seconds);
          });
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
      *response->mutable_memory() = MemoryWithRss(job->worker->memory());
    }
    done(status);
  });
}

absl::Status StageHost::Start(const petra::v1::StartRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status error;
  std::shared_ptr<StageJob> job = CurrentJob(request.job_id(), &error);
  if (job == nullptr) return error;
  if (draining_) return absl::UnavailableError(kDraining);
  if (job->state == StageStatus::STATE_FAILED) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job failed on this stage: ", job->error.message()));
  }
  if (request.phase() != petra::v1::PHASE_TRAIN &&
      request.phase() != petra::v1::PHASE_EVAL &&
      request.phase() != petra::v1::PHASE_GRADIENT_CHECK) {
    return absl::InvalidArgumentError(
        "phase must be PHASE_TRAIN, PHASE_EVAL or PHASE_GRADIENT_CHECK");
  }
  if (request.micro_batches() < 1 || request.micro_batches() > (1u << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro_batches ", request.micro_batches(), " is not in [1, 2^30]"));
  }
  PassInfo pass{request.phase(), request.epoch(),
                static_cast<int64_t>(request.micro_batches())};
  // Every micro-batch of the previous pass has been taken by now (the
  // coordinator starts a pass only when the last one has left every stage).
  pass.generation = job->mailbox.BeginPass(pass);
  job->state = StageStatus::STATE_RUNNING;
  ++pending_passes_;
  Post([this, job, pass] { RunPass(job, pass); });
  return absl::OkStatus();
}

void StageHost::RunPass(std::shared_ptr<StageJob> job, PassInfo pass) {
  absl::Status status;
  if (job->released) status = absl::CancelledError("released");
  auto snapshot = [this, &job] {
    const engine::StageWorker& w = *job->worker;
    const engine::StageReport r =
        engine::ReportOf(w, {static_cast<int>(job->assign.layers().begin()),
                             static_cast<int>(job->assign.layers().end())});
    petra::v1::StageStats s = engine::ToProto(r);
    *s.mutable_memory() = MemoryWithRss(r.memory);
    s.set_wait_seconds(job->mailbox.wait_seconds());
    metrics_->State(job->index(), r.in_flight, r.optimizer_steps, s.memory());
    metrics_->StalenessBound(job->index(), w.staleness_bound());
    metrics_->Replicas(
        job->index(), static_cast<int>(job->assign.replica().index()),
        r.allreduce_seconds, r.allreduce_bytes, r.replica_mismatches);
    metrics_->Optimizer(job->index(), w.learning_rate(), w.clipped_steps(),
                        w.gradient_norm());
    if (std::optional<engine::GradientDiagnostic> d = w.last_diagnostic()) {
      metrics_->Diagnostic(job->index(), "delayed", d->cosine_similarity,
                           d->norm_ratio);
    }
    if (const engine::EndToEndSummary e = w.end_to_end(); e.samples > 0) {
      metrics_->Diagnostic(job->index(), "end_to_end", e.cosine_similarity_mean,
                           e.norm_ratio_mean);
    }
    if (const engine::RebuildErrorSummary e = w.rebuild_error();
        e.samples > 0) {
      metrics_->RebuildError(job->index(), e.mean, e.max);
    }
    std::lock_guard<std::mutex> lock(mu_);
    job->stats = std::move(s);
  };
  std::unique_ptr<NeighborLinks> links;
  if (status.ok()) {
    links = std::make_unique<NeighborLinks>(*job, pass, options_.security,
                                            *metrics_, snapshot);
    {
      std::lock_guard<std::mutex> lock(job->streams_mu);
      job->cancel_streams = [&links] { links->Cancel(); };
    }
    if (job->released) job->CancelStreams();
    status = links->status();  // a data channel that could not be made
    if (status.ok()) status = RunPhase(*job, pass, links->outbox());
    status = links->Finish(status);
    {
      std::lock_guard<std::mutex> lock(job->streams_mu);
      job->cancel_streams = nullptr;
    }
    links.reset();
  }
  // Late messages of a pass that ended well are refused from now on; a
  // failed pass closes the mailbox with its reason instead (Fail below).
  if (status.ok()) job->mailbox.EndPass(pass.generation);
  if (job->worker != nullptr) snapshot();
  std::lock_guard<std::mutex> lock(mu_);
  --pending_passes_;
  if (!status.ok() && !job->released) Fail(*job, status);
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

void StageHost::Fail(StageJob& job, const absl::Status& error) {
  if (job.state == StageStatus::STATE_FAILED) return;
  job.state = StageStatus::STATE_FAILED;
  // The worker's errors name their stage already.
  const std::string own = absl::StrCat("stage ", job.index(), ": ");
  job.error =
      absl::Status(error.code(), absl::StartsWith(error.message(), own)
                                     ? std::string(error.message())
                                     : absl::StrCat(own, error.message()));
  PETRA_LOG_EVENT(kError, "job_failed", {"job_id", job.id()},
                  {"stage", absl::StrCat(job.index())},
                  {"reason", std::string(job.error.message())});
  job.mailbox.Close(std::string(job.error.message()));
}

void StageHost::Checkpoint(const petra::v1::CheckpointRequest& request,
                           petra::v1::CheckpointResponse* response, Done done) {
  absl::StatusOr<std::shared_ptr<StageJob>> found = FindJob(request.job_id());
  if (!found.ok()) return done(found.status());
  absl::StatusOr<StageCheckpoints::Target> target =
      checkpoints_.Where(**found, request.name());
  if (!target.ok()) return done(target.status());
  Post([this, job = *found, request, target = *target, response,
        done = std::move(done)] {
    done(checkpoints_.Write(*job, request, target, response));
  });
}

void StageHost::ReadCheckpoint(const petra::v1::ReadCheckpointRequest& request,
                               petra::v1::ReadCheckpointResponse* response,
                               Done done) {
  // A file read: on the I/O thread, so neither a reaction nor a pass waits.
  io_->Post([this, request, response, done = std::move(done)] {
    done(checkpoints_.Read(request, response));
  });
}

void StageHost::RestoreCheckpoint(
    const petra::v1::RestoreCheckpointRequest& request,
    petra::v1::RestoreCheckpointResponse* response, Done done) {
  std::shared_ptr<StageJob> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status error;
    job = CurrentJob(request.job_id(), &error);
    if (job == nullptr) return done(error);
  }
  // Each piece to disk on the I/O thread (the upload is touched there
  // only, in the order the pieces came); the restore on the executor.
  io_->Post([this, job, request, response, done = std::move(done)]() mutable {
    absl::StatusOr<std::optional<std::filesystem::path>> file =
        checkpoints_.AddPiece(*job, request, response);
    if (!file.ok()) return done(file.status());
    if (!file->has_value()) return done(absl::OkStatus());
    Post([job, file = **file, response, done = std::move(done)] {
      done(StageCheckpoints::Restore(*job, file, response));
    });
  });
}

void StageHost::Release(const petra::v1::ReleaseRequest& request, Done done) {
  std::shared_ptr<StageJob> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status error;
    job = CurrentJob(request.job_id(), &error);
    if (job == nullptr) {
      // Releasing what is not held is done already; another job is not.
      return done(job_ == nullptr ? absl::OkStatus() : error);
    }
    job->released = true;
    job->mailbox.Close("the job was released");
  }
  job->CancelStreams();
  Post([this, job, done = std::move(done)] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job_ == job) job_.reset();
    }
    metrics_->Idle(job->index());
    PETRA_LOG_EVENT(kInfo, "job_released", {"job_id", job->id()},
                    {"stage", absl::StrCat(job->index())});
    done(absl::OkStatus());
  });
}

const model::MemoryCapacity& StageHost::Capacity() {
  // Read once: the limit, the machine's memory or a device's do not change
  // while the server runs.
  std::call_once(capacity_once_, [this] {
    if (options_.memory_limit_bytes > 0) {
      capacity_ = {options_.memory_limit_bytes, "its --memory-limit-bytes"};
    } else {
      capacity_ = model::ReadMemoryCapacity(options_.device);
    }
  });
  return capacity_;
}

StageStatus StageHost::Status() {
  StageStatus s;
  s.set_device(options_.device);
  s.set_version(kVersion);
  char hostname[256] = {};
  if (gethostname(hostname, sizeof(hostname) - 1) == 0) {
    s.set_hostname(hostname);
  }
  link::FillLinkStatus(s);
  const model::MemoryCapacity& capacity = Capacity();
  s.set_memory_capacity_bytes(
      static_cast<uint64_t>(std::max<int64_t>(0, capacity.bytes)));
  s.set_memory_capacity_source(capacity.source);
  s.set_passes_running(
      static_cast<uint32_t>(std::max(0, pending_passes_.load())));
  std::lock_guard<std::mutex> lock(mu_);
  if (job_ == nullptr) {
    s.set_state(draining_ ? StageStatus::STATE_DRAINING
                          : StageStatus::STATE_IDLE);
    return s;
  }
  s.set_state(draining_ && job_->state != StageStatus::STATE_FAILED
                  ? StageStatus::STATE_DRAINING
                  : job_->state);
  s.set_job_id(job_->id());
  s.set_stage_index(job_->assign.stage_index());
  s.set_stage_count(job_->assign.stage_count());
  *s.mutable_layers() = job_->assign.layers();
  *s.mutable_stats() = job_->stats;
  s.mutable_stats()->set_stage_index(job_->assign.stage_index());
  s.mutable_stats()->set_replica(job_->assign.replica().index());
  if (!job_->error.ok()) *s.mutable_error() = wire::ToProtoStatus(job_->error);
  return s;
}

absl::StatusOr<std::shared_ptr<StageJob>> StageHost::FindJob(
    const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status error;
  std::shared_ptr<StageJob> job = CurrentJob(id, &error);
  if (job == nullptr) return error;
  return job;
}

template <typename Batch>
absl::Status StageHost::DeliverBatch(Batch payload,
                                     std::shared_ptr<ReplySink> from) {
  absl::StatusOr<std::shared_ptr<StageJob>> job =
      FindJob(payload.header.job_id);
  if (!job.ok()) return job.status();
  absl::StatusOr<engine::Transfer> arrival = StartCopy(**job, payload);
  if (!arrival.ok()) return arrival.status();
  return (*job)->mailbox.Deliver(std::move(payload), std::move(from),
                                 std::move(*arrival));
}

absl::Status StageHost::Deliver(model::ForwardBatch payload,
                                std::shared_ptr<ReplySink> from) {
  return DeliverBatch(std::move(payload), std::move(from));
}

absl::Status StageHost::Deliver(model::BackwardBatch payload,
                                std::shared_ptr<ReplySink> from) {
  return DeliverBatch(std::move(payload), std::move(from));
}

uint32_t StageHost::window() {
  std::lock_guard<std::mutex> lock(mu_);
  if (job_ == nullptr) return 1;
  return CreditWindow(job_->assign);
}

int StageHost::cuda_device() {
  std::lock_guard<std::mutex> lock(mu_);
  if (job_ == nullptr || !job_->transfer.device().is_cuda()) return -1;
  return std::max<int>(0, job_->transfer.device().index());
}

void StageHost::Drain(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pending_passes_ > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  AbandonJob("the stage server was stopped");
}

void StageHost::AbandonJob(const std::string& why) {
  std::shared_ptr<StageJob> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job = job_;
    if (job == nullptr) return;
    job->released = true;
    job->mailbox.Close(why);
  }
  job->CancelStreams();
}

}  // namespace petra::stage_server

#include "stage_server/stage_host.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/constant_time.h"
#include "services/base/event_log.h"
#include "services/engine/job_plan.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker.h"
#include "services/link/channel_factory.h"
#include "services/metrics/process_memory.h"
#include "services/model/compute_threads.h"
#include "services/model/device_memory.h"
#include "services/model/network.h"
#include "services/schedule/training_mode.h"
#include "services/version.h"
#include "services/wire/data_key.h"
#include "services/wire/status_map.h"
#include "stage_server/neighbor_links.h"
#include "stage_server/stage_host_internal.h"
#include "stage_server/stage_job.h"

namespace petra::stage_server {

using host_internal::kDraining;
using host_internal::MemoryWithRss;
using petra::v1::StageStatus;

petra::v1::MemoryBreakdown host_internal::MemoryWithRss(
    const engine::MemoryStats& m) {
  petra::v1::MemoryBreakdown p = engine::ToProto(m);
  p.set_process_rss_bytes(metrics::ProcessRssBytes());
  return p;
}

namespace {

// How often a pass refreshes the stage's statistics and metrics mid-pass.
constexpr std::chrono::milliseconds kSnapshotInterval{100};

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
  return engine::RunStagePass(*job.worker, job.mailbox, outbox, pass.phase,
                              pass.micro_batches,
                              schedule::PlanMode(job.assign.spec().training()));
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
  // After each micro-batch the outbox hands on, at most every
  // kSnapshotInterval: a snapshot reads /proc, sums the optimizer's state
  // and sets a dozen labelled metrics, a cost a micro-batch of one sample
  // should not pay (issue 67); scrapes and status polls come seconds apart.
  auto last_snapshot = std::chrono::steady_clock::time_point();
  auto every_so_often = [&snapshot, &last_snapshot] {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_snapshot < kSnapshotInterval) return;
    last_snapshot = now;
    snapshot();
  };
  std::unique_ptr<NeighborLinks> links;
  if (status.ok()) {
    links = std::make_unique<NeighborLinks>(*job, pass, options_.security,
                                            *metrics_, every_so_often);
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
    metrics_->Released(job->index());
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

absl::Status StageHost::AdmitData(const std::string& data_key) {
  if (data_key.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "a data stream must present its job's data key (header ",
        wire::kDataKeyHeader, "); only the job's feed and stages have it"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (job_ == nullptr) {
    return absl::UnauthenticatedError(
        "this stage server holds no job, so no data key is valid");
  }
  if (!base::ConstantTimeEquals(data_key, job_->assign.data_key())) {
    return absl::UnauthenticatedError(
        "the data key is not that of the job this stage server holds");
  }
  return absl::OkStatus();
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

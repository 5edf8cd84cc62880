#include "stage_server/stage_host.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/cli/durable_file.h"
#include "services/cli/paths.h"
#include "services/engine/job_plan.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker.h"
#include "services/engine/state_file.h"
#include "services/job/job_spec_validation.h"
#include "services/metrics/process_memory.h"
#include "services/version.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/stream_sender.h"
#include "stage_server/send_queue.h"

namespace petra::stage_server {

using petra::v1::StageStatus;

namespace {

// Credits each incoming stream of the job is granted.
uint32_t CreditWindow(const petra::v1::AssignRequest& a) {
  const uint32_t w = a.spec().training().max_in_flight();
  return w > 0 ? w : 2 * a.stage_count();
}

}  // namespace

struct StageJob {
  StageJob(const petra::v1::AssignRequest& a)
      : assign(a), mailbox(a.stage_index(), a.stage_count(), CreditWindow(a)) {}
  const petra::v1::AssignRequest assign;
  std::unique_ptr<engine::StageWorker> worker;  // set by the executor
  StageMailbox mailbox;
  // Guarded by StageHost::mu_.
  StageStatus::State state = StageStatus::STATE_ASSIGNED;
  absl::Status error;
  petra::v1::StageStats stats;
  std::atomic<bool> released{false};
  // Aborts the outgoing streams of the running pass.
  std::mutex streams_mu;
  std::function<void()> cancel_streams;
  // A checkpoint being uploaded by RestoreCheckpoint; guarded by
  // StageHost::mu_.
  std::string restore_bytes;
  uint64_t restore_total = 0;

  const std::string& id() const { return assign.job_id(); }
  int index() const { return static_cast<int>(assign.stage_index()); }
  int count() const { return static_cast<int>(assign.stage_count()); }
  void CancelStreams() {
    std::lock_guard<std::mutex> lock(streams_mu);
    if (cancel_streams) cancel_streams();
  }
};

namespace {

constexpr uint32_t kMaxReadBytes = 4 << 20;
// A restored checkpoint is held in memory until its last piece arrives.
constexpr uint64_t kMaxRestoreBytes = uint64_t{8} << 30;
constexpr uint64_t kMaxRestorePieceBytes = 16 << 20;

// Names the coordinator chooses (job ids, checkpoint names) become paths
// under --state-dir: plain relative names only.
absl::Status CheckRelativeName(const std::string& name, const char* what) {
  if (name.empty() || name.size() > 200 || name.front() == '/' ||
      absl::StrContains(name, "..") || absl::StrContains(name, "//")) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " \"", name, "\" is not a relative name without \"..\""));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' &&
        c != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " \"", name, "\": only letters, digits and -_./ are allowed"));
    }
  }
  return absl::OkStatus();
}

// Memory as the wire carries it, with this process's resident set.
petra::v1::MemoryBreakdown MemoryWithRss(const engine::MemoryStats& m) {
  petra::v1::MemoryBreakdown p = engine::ToProto(m);
  p.set_process_rss_bytes(metrics::ProcessRssBytes());
  return p;
}

template <typename Message>
using Sender = wire::StreamSender<Message>;

template <typename Message>
int64_t PayloadBytes(const std::vector<Message>& parts) {
  int64_t n = 0;
  for (const Message& m : parts) n += static_cast<int64_t>(m.ByteSizeLong());
  return n;
}

// The stage's outbox: hands micro-batches to the send queues, whose
// threads encode them onto the streams to its neighbours, and reports
// completions on the coordinator's streams.
class NeighborOutbox : public engine::StageOutbox {
 public:
  NeighborOutbox(StageJob& job, const PassInfo& pass,
                 Sender<petra::v1::ForwardMessage>* next,
                 Sender<petra::v1::BackwardMessage>* previous,
                 StageMetrics& metrics, std::function<void()> after_each)
      : job_(job),
        pass_(pass),
        next_(next),
        previous_(previous),
        metrics_(metrics),
        after_each_(std::move(after_each)) {}

  // Waits for every queued send; the first error.
  absl::Status Flush() {
    absl::Status forward = forward_queue_.Flush();
    absl::Status backward = backward_queue_.Flush();
    return forward.ok() ? backward : forward;
  }

  void Observe(const Work& w) override {
    metrics_.Computed(job_.index(), w.backward, w.samples, w.seconds);
    if (w.backward) {
      metrics_.Staleness(job_.index(), w.delay_ticks, w.staleness_steps);
    }
  }

  absl::Status SendForward(engine::ForwardItem item) override {
    wire::ForwardPayload p;
    p.header = Header(item.id);
    p.x = std::move(item.x);
    after_each_();
    return forward_queue_.Push([this, p = std::move(p)] {
      absl::StatusOr<std::vector<petra::v1::ForwardMessage>> parts =
          wire::EncodeForward(p, wire::kTensorChunkBytes);
      if (!parts.ok()) return parts.status();
      metrics_.Sent(false, PayloadBytes(*parts));
      return next_->Send(*parts);
    });
  }

  absl::Status SendBackward(engine::BackwardItem item) override {
    wire::BackwardPayload p;
    p.header = Header(item.id);
    p.output = std::move(item.output);
    p.grad = std::move(item.grad);
    after_each_();
    return backward_queue_.Push([this, p = std::move(p)] {
      absl::StatusOr<std::vector<petra::v1::BackwardMessage>> parts =
          wire::EncodeBackward(p, wire::kTensorChunkBytes);
      if (!parts.ok()) return parts.status();
      metrics_.Sent(true, PayloadBytes(*parts));
      return previous_->Send(*parts);
    });
  }

  void ReportLoss(int64_t id, const engine::LossOutput& loss) override {
    petra::v1::StreamReply r = DoneReply(id);
    r.mutable_done()->set_loss(loss.loss);
    r.mutable_done()->set_correct(static_cast<uint32_t>(loss.correct));
    r.mutable_done()->set_samples(static_cast<uint32_t>(loss.samples));
    after_each_();
    if (auto sink = job_.mailbox.labels_sink()) sink->Send(std::move(r));
  }

  void Finished(int64_t id) override {
    after_each_();
    if (auto sink = job_.mailbox.data_sink()) sink->Send(DoneReply(id));
  }

 private:
  wire::MessageHeader Header(int64_t id) const {
    wire::MessageHeader h;
    h.job_id = job_.id();
    h.micro_batch_id = static_cast<uint64_t>(id);
    h.step = static_cast<uint64_t>(job_.worker->optimizer_steps());
    h.phase = pass_.phase;
    h.sender_stage = job_.index();
    h.epoch = pass_.epoch;
    return h;
  }
  petra::v1::StreamReply DoneReply(int64_t id) const {
    petra::v1::StreamReply r;
    petra::v1::MicroBatchDone* d = r.mutable_done();
    d->set_micro_batch_id(static_cast<uint64_t>(id));
    d->set_phase(pass_.phase);
    d->set_stage_index(job_.index());
    d->set_step(static_cast<uint64_t>(job_.worker->optimizer_steps()));
    return r;
  }

  StageJob& job_;
  const PassInfo pass_;
  Sender<petra::v1::ForwardMessage>* next_;
  Sender<petra::v1::BackwardMessage>* previous_;
  StageMetrics& metrics_;
  std::function<void()> after_each_;
  // Two micro-batches may wait per direction: enough to cover one tick's
  // compute, while the receiver's credits bound what is in flight.
  SendQueue forward_queue_{2};
  SendQueue backward_queue_{2};
};

}  // namespace

StageHost::StageHost(Options options)
    : options_(std::move(options)),
      metrics_(options_.metrics != nullptr ? options_.metrics : &no_metrics_),
      tasks_(1 << 16) {
  executor_ = std::thread([this] {
    // Intra-op threads are per calling thread: the stage's torch work all
    // runs here.
    at::set_num_threads(std::max(1, options_.threads));
    while (std::optional<std::function<void()>> task = tasks_.Pop()) (*task)();
  });
}

StageHost::~StageHost() {
  AbandonJob("the stage server is stopping");
  tasks_.Close();
  executor_.join();
}

void StageHost::Post(std::function<void()> task) {
  tasks_.Push(std::move(task));
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
  if (!request.device().empty() && request.device() != options_.device) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("the job places this stage on \"", request.device(),
                     "\" but this server runs on \"", options_.device, "\"")));
  }
  std::filesystem::path restore_file;
  if (!request.restore_checkpoint().empty()) {
    if (absl::Status s = CheckRelativeName(request.restore_checkpoint(),
                                           "restore_checkpoint");
        !s.ok()) {
      return refuse(s);
    }
    absl::StatusOr<std::filesystem::path> confined = cli::ConfinedPath(
        options_.state_dir, request.restore_checkpoint(), "restore_checkpoint");
    if (!confined.ok()) return refuse(confined.status());
    restore_file = std::move(*confined);
  }
  auto job = std::make_shared<StageJob>(request);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) {
      return refuse(
          absl::FailedPreconditionError("the stage server is draining: it "
                                        "takes no new work before it stops"));
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
    std::vector<model::BlockRange> ranges;
    for (const auto& r : job->assign.partition()) {
      ranges.push_back(
          {static_cast<int>(r.begin()), static_cast<int>(r.end())});
    }
    absl::StatusOr<std::vector<std::unique_ptr<engine::StageWorker>>> w =
        engine::BuildStageWorkers(
            spec, ranges, static_cast<int64_t>(job->assign.steps_per_epoch()),
            {job->index()});
    absl::Status status = w.status();
    if (status.ok()) {
      job->worker = std::move(w->front());
      job->mailbox.set_wait_observer(
          [m = metrics_, j = job->index()](bool backward, double seconds) {
            m->Waited(j, backward, seconds);
          });
      const std::string& restore = job->assign.restore_checkpoint();
      if (!restore.empty()) {
        std::ifstream in(restore_file, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
        if (!in && bytes.empty()) {
          status = absl::NotFoundError(
              absl::StrCat("restore_checkpoint \"", restore, "\" not found"));
        } else {
          status = engine::RestoreStageCheckpoint(bytes, *job->worker).status();
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) {
      if (job_ == job) job_.reset();
    } else {
      int64_t params = 0;
      for (const torch::Tensor& p : job->worker->parameters())
        params += p.numel();
      response->set_parameter_count(static_cast<uint64_t>(params));
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
  if (draining_)
    return absl::FailedPreconditionError(
        "the stage server is draining: it takes no new work before it stops");
  if (job->state == StageStatus::STATE_FAILED) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job failed on this stage: ", job->error.message()));
  }
  if (request.phase() != petra::v1::PHASE_TRAIN &&
      request.phase() != petra::v1::PHASE_EVAL) {
    return absl::InvalidArgumentError(
        "phase must be PHASE_TRAIN or PHASE_EVAL");
  }
  if (request.micro_batches() < 1 || request.micro_batches() > (1u << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro_batches ", request.micro_batches(), " is not in [1, 2^30]"));
  }
  PassInfo pass{request.phase(), request.epoch(),
                static_cast<int64_t>(request.micro_batches())};
  // Every micro-batch of the previous pass has been taken by now (the
  // coordinator starts a pass only when the last one has left every stage).
  job->mailbox.BeginPass(pass);
  job->state = StageStatus::STATE_RUNNING;
  ++pending_passes_;
  Post([this, job, pass] { RunPass(job, pass); });
  return absl::OkStatus();
}

void StageHost::RunPass(std::shared_ptr<StageJob> job, PassInfo pass) {
  absl::Status status;
  if (job->released) status = absl::CancelledError("released");
  const bool train = pass.phase == petra::v1::PHASE_TRAIN;
  std::unique_ptr<Sender<petra::v1::ForwardMessage>> next;
  std::unique_ptr<Sender<petra::v1::BackwardMessage>> previous;
  if (status.ok() && job->index() + 1 < job->count()) {
    auto stub = petra::v1::StageService::NewStub(
        wire::CreateChannel(job->assign.next_address(), options_.security));
    next = std::make_unique<Sender<petra::v1::ForwardMessage>>(
        absl::StrCat("stage ", job->index() + 1, " (",
                     job->assign.next_address(), ")"),
        [stub = std::shared_ptr(std::move(stub))](grpc::ClientContext* c) {
          return stub->Forward(c);
        });
  }
  if (status.ok() && train && job->index() > 0) {
    auto stub = petra::v1::StageService::NewStub(
        wire::CreateChannel(job->assign.previous_address(), options_.security));
    previous = std::make_unique<Sender<petra::v1::BackwardMessage>>(
        absl::StrCat("stage ", job->index() - 1, " (",
                     job->assign.previous_address(), ")"),
        [stub = std::shared_ptr(std::move(stub))](grpc::ClientContext* c) {
          return stub->Backward(c);
        });
  }
  {
    std::lock_guard<std::mutex> lock(job->streams_mu);
    job->cancel_streams = [&] {
      if (next) next->Cancel();
      if (previous) previous->Cancel();
    };
  }
  if (job->released) job->CancelStreams();

  auto snapshot = [this, &job] {
    const engine::StageWorker& w = *job->worker;
    const engine::StageReport r =
        engine::ReportOf(w, {static_cast<int>(job->assign.layers().begin()),
                             static_cast<int>(job->assign.layers().end())});
    petra::v1::StageStats s = engine::ToProto(r);
    *s.mutable_memory() = MemoryWithRss(r.memory);
    s.set_wait_seconds(job->mailbox.wait_seconds());
    metrics_->State(job->index(), r.in_flight, r.optimizer_steps, s.memory());
    if (std::optional<engine::GradientDiagnostic> d = w.last_diagnostic()) {
      metrics_->Diagnostic(job->index(), d->cosine_similarity, d->norm_ratio);
    }
    std::lock_guard<std::mutex> lock(mu_);
    job->stats = std::move(s);
  };
  if (status.ok()) {
    NeighborOutbox outbox(*job, pass, next.get(), previous.get(), *metrics_,
                          snapshot);
    const bool overlap = job->assign.spec().training().mode() !=
                         petra::v1::TRAINING_MODE_BACKPROP;
    status = train ? engine::RunStageEpoch(*job->worker, job->mailbox, outbox,
                                           pass.micro_batches, overlap)
                   : engine::RunStageEval(*job->worker, job->mailbox, outbox,
                                          pass.micro_batches);
    // A failed pass cancels the streams first, so queued sends end at once.
    if (!status.ok()) job->CancelStreams();
    if (absl::Status sent = outbox.Flush(); status.ok()) status = sent;
  }
  if (!status.ok()) job->CancelStreams();
  for (absl::Status s : {next ? next->Close() : absl::OkStatus(),
                         previous ? previous->Close() : absl::OkStatus()}) {
    if (status.ok() && !s.ok()) status = s;
  }
  {
    std::lock_guard<std::mutex> lock(job->streams_mu);
    job->cancel_streams = nullptr;
  }
  next.reset();
  previous.reset();
  if (job->worker != nullptr) snapshot();
  std::lock_guard<std::mutex> lock(mu_);
  --pending_passes_;
  if (!status.ok() && !job->released) Fail(*job, status);
}

void StageHost::Fail(StageJob& job, const absl::Status& error) {
  if (job.state == StageStatus::STATE_FAILED) return;
  job.state = StageStatus::STATE_FAILED;
  job.error = absl::Status(
      error.code(), absl::StrCat("stage ", job.index(), ": ", error.message()));
  job.mailbox.Close(std::string(job.error.message()));
}

void StageHost::Checkpoint(const petra::v1::CheckpointRequest& request,
                           petra::v1::CheckpointResponse* response, Done done) {
  absl::StatusOr<std::shared_ptr<StageJob>> found = FindJob(request.job_id());
  if (!found.ok()) return done(found.status());
  if (absl::Status s = CheckRelativeName(request.name(), "name"); !s.ok())
    return done(s);
  const std::string rel = absl::StrCat((*found)->id(), "/", request.name(),
                                       "/stage-", (*found)->index(), ".pt");
  // The job's directory or the name may be a symbolic link out of the root.
  absl::StatusOr<std::filesystem::path> file =
      cli::ConfinedPath(options_.state_dir, rel, "name");
  if (!file.ok()) return done(file.status());
  Post([this, job = *found, request, rel, file = *file, response,
        done = std::move(done)] {
    if (job->worker == nullptr || job->released) {
      return done(absl::FailedPreconditionError("the job was released"));
    }
    engine::StageCheckpointMeta meta;
    meta.stage_index = job->index();
    meta.optimizer_steps = job->worker->optimizer_steps();
    meta.epoch = static_cast<int64_t>(request.epoch());
    meta.samples_seen = static_cast<int64_t>(request.samples_seen());
    absl::StatusOr<std::string> bytes =
        engine::EncodeStageCheckpoint(*job->worker, meta);
    if (!bytes.ok()) return done(bytes.status());
    if (absl::Status s = cli::WriteFileAtomically(file, *bytes); !s.ok()) {
      return done(s);
    }
    response->set_path(rel);
    response->set_size_bytes(bytes->size());
    response->set_sha256(cli::Sha256Hex(*bytes));
    done(absl::OkStatus());
  });
}

absl::Status StageHost::ReadCheckpoint(
    const petra::v1::ReadCheckpointRequest& request,
    petra::v1::ReadCheckpointResponse* response) {
  if (absl::Status s = CheckRelativeName(request.path(), "path"); !s.ok())
    return s;
  if (!absl::StartsWith(request.path(), request.job_id() + "/")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "path \"", request.path(), "\" is not a checkpoint of job \"",
        request.job_id(), "\""));
  }
  absl::StatusOr<std::filesystem::path> path =
      cli::ConfinedPath(options_.state_dir, request.path(), "path");
  if (!path.ok()) return path.status();
  std::error_code ec;
  std::ifstream in(*path, std::ios::binary | std::ios::ate);
  // A directory opens too, and then reports a nonsense size.
  if (!in || !std::filesystem::is_regular_file(*path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint \"", request.path(), "\""));
  }
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  if (request.offset() > total) {
    return absl::OutOfRangeError(absl::StrCat(
        "offset ", request.offset(), " is past the end (", total, " bytes)"));
  }
  const uint32_t max = request.max_bytes() == 0
                           ? kMaxReadBytes
                           : std::min(request.max_bytes(), kMaxReadBytes);
  std::string data(std::min<uint64_t>(max, total - request.offset()), '\0');
  in.seekg(static_cast<std::streamoff>(request.offset()));
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  response->set_data(std::move(data));
  response->set_total_bytes(total);
  return absl::OkStatus();
}

void StageHost::RestoreCheckpoint(
    const petra::v1::RestoreCheckpointRequest& request,
    petra::v1::RestoreCheckpointResponse* response, Done done) {
  std::shared_ptr<StageJob> job;
  std::string bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status error;
    job = CurrentJob(request.job_id(), &error);
    if (job == nullptr) return done(error);
    const uint64_t total = request.total_bytes();
    if (total == 0 || total > kMaxRestoreBytes) {
      return done(absl::InvalidArgumentError(absl::StrCat(
          "total_bytes ", total, " is not in [1, ", kMaxRestoreBytes, "]")));
    }
    if (request.data().empty() ||
        request.data().size() > kMaxRestorePieceBytes) {
      return done(absl::InvalidArgumentError(
          absl::StrCat("a piece must hold 1 to ", kMaxRestorePieceBytes,
                       " bytes, got ", request.data().size())));
    }
    if (request.offset() == 0) {
      job->restore_bytes.clear();
      job->restore_total = total;
    }
    if (request.offset() != job->restore_bytes.size() ||
        total != job->restore_total) {
      return done(absl::OutOfRangeError(
          absl::StrCat("piece at offset ", request.offset(), " of ", total,
                       " bytes does not follow the ", job->restore_bytes.size(),
                       " bytes received of ", job->restore_total)));
    }
    if (request.offset() + request.data().size() > total) {
      return done(absl::OutOfRangeError(absl::StrCat(
          "piece ends at ", request.offset() + request.data().size(),
          ", past total_bytes ", total)));
    }
    job->restore_bytes += request.data();
    response->set_received_bytes(job->restore_bytes.size());
    if (job->restore_bytes.size() < total) return done(absl::OkStatus());
    bytes = std::move(job->restore_bytes);
    job->restore_bytes.clear();
    job->restore_total = 0;
  }
  Post([job, bytes = std::move(bytes), response, done = std::move(done)] {
    if (job->worker == nullptr || job->released) {
      return done(absl::FailedPreconditionError("the job was released"));
    }
    absl::StatusOr<engine::StageCheckpointMeta> meta =
        engine::RestoreStageCheckpoint(bytes, *job->worker);
    if (!meta.ok()) return done(meta.status());
    response->set_restored(true);
    response->set_epoch(static_cast<uint64_t>(meta->epoch));
    response->set_optimizer_steps(static_cast<uint64_t>(meta->optimizer_steps));
    response->set_samples_seen(static_cast<uint64_t>(meta->samples_seen));
    done(absl::OkStatus());
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
    done(absl::OkStatus());
  });
}

StageStatus StageHost::Status() {
  StageStatus s;
  s.set_device(options_.device);
  s.set_version(kVersion);
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

absl::Status StageHost::DeliverForward(wire::ForwardPayload payload,
                                       std::shared_ptr<ReplySink> from) {
  absl::StatusOr<std::shared_ptr<StageJob>> job =
      FindJob(payload.header.job_id);
  if (!job.ok()) return job.status();
  return (*job)->mailbox.DeliverForward(std::move(payload), std::move(from));
}

absl::Status StageHost::DeliverBackward(wire::BackwardPayload payload,
                                        std::shared_ptr<ReplySink> from) {
  absl::StatusOr<std::shared_ptr<StageJob>> job =
      FindJob(payload.header.job_id);
  if (!job.ok()) return job.status();
  return (*job)->mailbox.DeliverBackward(std::move(payload), std::move(from));
}

uint32_t StageHost::window() {
  std::lock_guard<std::mutex> lock(mu_);
  if (job_ == nullptr) return 1;
  return CreditWindow(job_->assign);
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

#include "coordinator/coordinator_service.h"

#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "services/wire/reply_queue.h"
#include "services/wire/status_map.h"

namespace petra::coordinator {
namespace {

constexpr size_t kExportChunkBytes = 1 << 20;

// One call's audit line, written once when the call ends (a copy carries
// it into the reaction that ends the call).
class Audit {
 public:
  Audit() = default;
  Audit(AuditLog* log, petra::v1::AuditRecord record)
      : log_(log), record_(std::move(record)) {}
  void Done(const absl::Status& status, const std::string& new_job = "") {
    if (log_ == nullptr) return;
    petra::v1::AuditRecord r = record_;
    if (!new_job.empty()) r.set_job_id(new_job);
    r.set_code(absl::StatusCodeToString(status.code()));
    r.set_message(std::string(status.message()));
    log_->Append(std::move(r));
    log_ = nullptr;
  }
  void Done(const grpc::Status& status) {
    Done(absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message()));
  }

 private:
  AuditLog* log_ = nullptr;
  petra::v1::AuditRecord record_;
};

// The job a response names (a submission's new id).
std::string NewJobId(const petra::v1::Job& job) { return job.id(); }
template <typename Response>
std::string NewJobId(const Response&) {
  return "";
}

template <typename Response>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                const absl::StatusOr<Response>& result,
                                Response* response, CoordinatorMetrics* metrics,
                                Audit audit) {
  // metrics is null when the error was counted already.
  if (!result.ok() && metrics != nullptr)
    metrics->Error(result.status().code());
  audit.Done(result.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = *result;
  reactor->Finish(wire::ToGrpcStatus(result.status()));
  return reactor;
}

// The same, with `result` computed on `io` (it writes the job record to
// disk): the reaction only hands the work over.
template <typename Response>
grpc::ServerUnaryReactor* ReplyLater(
    grpc::CallbackServerContext* context, Response* response,
    CoordinatorMetrics* metrics, engine::SerialExecutor& io, Audit audit,
    std::function<absl::StatusOr<Response>()> result) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [reactor, response, metrics,
                 audit](absl::StatusOr<Response> r) mutable {
    if (!r.ok() && metrics != nullptr) metrics->Error(r.status().code());
    audit.Done(r.status(), r.ok() ? NewJobId(*r) : std::string());
    if (r.ok()) *response = *std::move(r);
    reactor->Finish(wire::ToGrpcStatus(r.status()));
  };
  if (!io.Post([finish, result = std::move(result)]() mutable {
        finish(result());
      })) {
    finish(absl::UnavailableError("the coordinator is stopping"));
  }
  return reactor;
}

// A job's events to one client, written one at a time (wire::ReplyQueue):
// the stream finishes after the job's last event, or as soon as the client
// is gone. The queue outlives the reactor (the job record holds it).
class WatchReactor : public grpc::ServerWriteReactor<petra::v1::JobEvent> {
 public:
  using Queue = wire::ReplyQueue<petra::v1::JobEvent>;
  class Events : public JobWatcher {
   public:
    explicit Events(Queue::Stream stream)
        : queue(std::move(stream), &KeepLatestProgress) {}
    void OnEvent(const petra::v1::JobEvent& event, bool last) override {
      queue.Push(event, last);
    }
    Queue queue;

   private:
    // A slow client gets the latest progress, not a growing backlog.
    static bool KeepLatestProgress(petra::v1::JobEvent& waiting,
                                   const petra::v1::JobEvent& incoming) {
      if (incoming.kind() != petra::v1::JobEvent::KIND_PROGRESS ||
          waiting.kind() != petra::v1::JobEvent::KIND_PROGRESS) {
        return false;
      }
      waiting = incoming;
      return true;
    }
  };

  WatchReactor(JobManager* jobs, const std::string& id, Audit audit)
      : events_(std::make_shared<Events>(Queue::Stream{
            [this](const petra::v1::JobEvent* e) { StartWrite(e); },
            [this](const grpc::Status& s) { End(s); }})),
        audit_(std::move(audit)) {
    if (absl::Status s = jobs->Watch(id, events_); !s.ok()) {
      events_->queue.Detach();
      End(wire::ToGrpcStatus(s));
    }
  }
  // Finish, audited.
  void End(const grpc::Status& status) {
    audit_.Done(status);
    Finish(status);
  }
  void OnWriteDone(bool ok) override { events_->queue.WriteDone(ok); }
  void OnCancel() override { events_->queue.Cancelled(); }
  void OnDone() override {
    events_->queue.Detach();
    delete this;
  }

 private:
  std::shared_ptr<Events> events_;
  Audit audit_;
};

// Streams a job's export file in chunks, one write at a time. Finding,
// opening and reading the file happen on the service's I/O thread, never in
// a reaction: each step posts the next, and the step that ends the stream
// calls Finish as its last act (OnDone, which deletes the reactor, cannot
// come before).
class ExportReactor : public grpc::ServerWriteReactor<petra::v1::ExportChunk> {
 public:
  ExportReactor(JobManager* jobs, const petra::v1::ExportJobRequest& request,
                engine::SerialExecutor* io, Audit audit)
      : io_(io), audit_(std::move(audit)) {
    if (!petra::v1::ExportJobRequest::Format_IsValid(request.format())) {
      End(wire::ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("format ", request.format(), " is not supported"))));
      return;
    }
    // Making a TorchScript file takes seconds: on the I/O executor, never
    // in a reaction.
    Later([this, jobs, id = request.job_id(), format = request.format()] {
      Open(jobs, id, format);
    });
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    chunk_.Clear();
    Later([this] { Next(); });
  }
  void OnDone() override { delete this; }

 private:
  void Later(std::function<void()> step) {
    if (!io_->Post(std::move(step))) {
      End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       "the coordinator is stopping"));
    }
  }
  void Open(JobManager* jobs, const std::string& id,
            petra::v1::ExportJobRequest::Format format) {
    absl::StatusOr<std::string> path = jobs->ExportFile(id, format);
    if (!path.ok()) {
      End(wire::ToGrpcStatus(path.status()));
      return;
    }
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(*path, ec);
    in_.open(*path, std::ios::binary);
    if (ec || !in_) {
      End(wire::ToGrpcStatus(absl::DataLossError(absl::StrCat(
          "the export file of job \"", id, "\" could not be opened",
          ec ? absl::StrCat(": ", ec.message()) : std::string()))));
      return;
    }
    total_ = size;
    chunk_.set_filename(
        id + (format == petra::v1::ExportJobRequest::FORMAT_TORCHSCRIPT
                  ? ".torchscript.pt"
                  : ".pt"));
    chunk_.set_total_bytes(total_);
    Next();
  }
  void Next() {
    // The first chunk goes out even for an empty file: it carries the name
    // and the size.
    if (sent_ >= total_ && started_) {
      End(grpc::Status::OK);
      return;
    }
    started_ = true;
    std::string data(std::min<uint64_t>(kExportChunkBytes, total_ - sent_),
                     '\0');
    in_.read(data.data(), static_cast<std::streamsize>(data.size()));
    if (!in_) {
      End(grpc::Status(grpc::StatusCode::DATA_LOSS,
                       "the export file could not be read"));
      return;
    }
    sent_ += data.size();
    chunk_.set_data(std::move(data));
    StartWrite(&chunk_);
  }

  // Finish, audited.
  void End(const grpc::Status& status) {
    audit_.Done(status);
    Finish(status);
  }

  engine::SerialExecutor* io_;
  Audit audit_;
  std::ifstream in_;
  uint64_t total_ = 0, sent_ = 0;
  bool started_ = false;
  petra::v1::ExportChunk chunk_;
};

// A server stream refused before it starts.
template <typename Message>
class RefusedStream : public grpc::ServerWriteReactor<Message> {
 public:
  explicit RefusedStream(const absl::Status& status) {
    this->Finish(wire::ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

CoordinatorServiceImpl::CoordinatorServiceImpl(JobManager* jobs,
                                               CoordinatorMetrics* metrics,
                                               const AccessControl* access,
                                               AuditLog* audit)
    : jobs_(jobs), metrics_(metrics), access_(access), audit_(audit) {}

absl::StatusOr<Principal> CoordinatorServiceImpl::Admit(
    grpc::CallbackServerContext* context, Action action,
    const std::string& job_id, petra::v1::AuditRecord& record) {
  record.set_call(ActionName(action));
  record.set_job_id(job_id);
  record.set_peer(context->peer());
  std::optional<std::string> authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization.emplace(it->second.data(), it->second.size());
  }
  absl::StatusOr<Principal> who = access_->Identify(authorization);
  absl::Status allowed = who.status();
  if (who.ok()) {
    record.set_user(who->user);
    record.set_role(who->role);
    std::string owner;
    // Only a member's cancel or export depends on whose job it is; a job
    // that is not there is the call's own NOT_FOUND.
    if (who->role == petra::v1::ROLE_MEMBER &&
        (action == Action::kCancel || action == Action::kExport)) {
      absl::StatusOr<petra::v1::Job> job = jobs_->Get(job_id);
      if (job.ok()) {
        owner = job->owner();
      } else {
        allowed = job.status();
      }
    }
    if (allowed.ok()) {
      allowed = AccessControl::Authorize(*who, action, job_id, owner);
    }
  }
  if (!allowed.ok()) {
    metrics_->Error(allowed.code());
    Audit(audit_, record).Done(allowed);
    return allowed;
  }
  return who;
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::SubmitJob(
    grpc::CallbackServerContext* context,
    const petra::v1::SubmitJobRequest* request, petra::v1::Job* response) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who = Admit(context, Action::kSubmit, "", record);
  // Resuming reads the earlier job's weights: a member resumes its own.
  const std::string& from = request->spec().checkpoint().resume_from_job();
  if (who.ok() && !from.empty() && who->role == petra::v1::ROLE_MEMBER) {
    absl::StatusOr<petra::v1::Job> earlier = jobs_->Get(from);
    if (earlier.ok()) {
      if (absl::Status s = AccessControl::Authorize(*who, Action::kExport, from,
                                                    earlier->owner());
          !s.ok()) {
        metrics_->Error(s.code());
        Audit(audit_, record).Done(s);
        who = s;
      }
    }
  }
  if (who.ok()) {
    if (absl::Status s =
            AccessControl::AuthorizePriority(*who, request->spec().priority());
        !s.ok()) {
      metrics_->Error(s.code());
      Audit(audit_, record).Done(s);
      who = s;
    }
  }
  if (!who.ok()) {
    return Reply(context, absl::StatusOr<petra::v1::Job>(who.status()),
                 response, nullptr, Audit());
  }
  return ReplyLater<petra::v1::Job>(
      context, response, metrics_, io_, Audit(audit_, record),
      [this, spec = request->spec(), owner = who->user] {
        return jobs_->Submit(spec, owner);
      });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::GetJob(
    grpc::CallbackServerContext* context,
    const petra::v1::GetJobRequest* request, petra::v1::Job* response) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who =
      Admit(context, Action::kGet, request->job_id(), record);
  if (!who.ok()) {
    return Reply(context, absl::StatusOr<petra::v1::Job>(who.status()),
                 response, nullptr, Audit());
  }
  return Reply(context, jobs_->Get(request->job_id()), response, metrics_,
               Audit(audit_, record));
}

grpc::ServerWriteReactor<petra::v1::JobEvent>* CoordinatorServiceImpl::WatchJob(
    grpc::CallbackServerContext* context,
    const petra::v1::WatchJobRequest* request) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who =
      Admit(context, Action::kWatch, request->job_id(), record);
  if (!who.ok()) return new RefusedStream<petra::v1::JobEvent>(who.status());
  return new WatchReactor(jobs_, request->job_id(), Audit(audit_, record));
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::ListJobs(
    grpc::CallbackServerContext* context,
    const petra::v1::ListJobsRequest* request,
    petra::v1::ListJobsResponse* response) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who = Admit(context, Action::kList, "", record);
  if (!who.ok()) {
    return Reply(context,
                 absl::StatusOr<petra::v1::ListJobsResponse>(who.status()),
                 response, nullptr, Audit());
  }
  if (request->mine() && who->user.empty()) {
    return Reply(context,
                 absl::StatusOr<petra::v1::ListJobsResponse>(
                     absl::FailedPreconditionError(
                         "mine: this coordinator has no users (no "
                         "--auth-token-file or --users-file), so its jobs "
                         "have no owner")),
                 response, metrics_, Audit(audit_, record));
  }
  return Reply(context, jobs_->List(*request, who->user), response, metrics_,
               Audit(audit_, record));
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::CancelJob(
    grpc::CallbackServerContext* context,
    const petra::v1::CancelJobRequest* request, petra::v1::Job* response) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who =
      Admit(context, Action::kCancel, request->job_id(), record);
  if (!who.ok()) {
    return Reply(context, absl::StatusOr<petra::v1::Job>(who.status()),
                 response, nullptr, Audit());
  }
  return ReplyLater<petra::v1::Job>(
      context, response, metrics_, io_, Audit(audit_, record),
      [this, id = request->job_id()] { return jobs_->Cancel(id); });
}

grpc::ServerWriteReactor<petra::v1::ExportChunk>*
CoordinatorServiceImpl::ExportJob(grpc::CallbackServerContext* context,
                                  const petra::v1::ExportJobRequest* request) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who =
      Admit(context, Action::kExport, request->job_id(), record);
  if (!who.ok()) {
    return new RefusedStream<petra::v1::ExportChunk>(who.status());
  }
  return new ExportReactor(jobs_, *request, &io_, Audit(audit_, record));
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::ListServers(
    grpc::CallbackServerContext* context,
    const petra::v1::ListServersRequest* /*request*/,
    petra::v1::ListServersResponse* response) {
  petra::v1::AuditRecord record;
  absl::StatusOr<Principal> who =
      Admit(context, Action::kListServers, "", record);
  if (!who.ok()) {
    return Reply(context,
                 absl::StatusOr<petra::v1::ListServersResponse>(who.status()),
                 response, nullptr, Audit());
  }
  // Every server is asked for its status: off the reaction, on io_.
  return ReplyLater<petra::v1::ListServersResponse>(
      context, response, metrics_, io_, Audit(audit_, record),
      [this]() -> absl::StatusOr<petra::v1::ListServersResponse> {
        return jobs_->ListServers();
      });
}

}  // namespace petra::coordinator

#include "stage_server/stage_service.h"

#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "services/link/channel_factory.h"
#include "services/wire/bearer_token.h"
#include "services/wire/stage_messages.h"
#include "services/wire/status_map.h"
#include "services/wire/transport_security.h"

namespace petra::stage_server {
namespace {

using petra::v1::StreamReply;

grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* context,
                                   const absl::Status& status,
                                   StageMetrics& metrics) {
  if (!status.ok()) metrics.Error(status.code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

// A unary reactor finished later, from the host's executor.
StageHost::Done FinishLater(grpc::ServerUnaryReactor* reactor,
                            StageMetrics& metrics) {
  return [reactor, &metrics](absl::Status s) {
    if (!s.ok()) metrics.Error(s.code());
    reactor->Finish(wire::ToGrpcStatus(s));
  };
}

// One incoming stream. Reads one message at a time; replies queue and are
// written one at a time. The reply queue outlives the reactor (the mailbox
// holds it to send credits later); once the stream is over, replies are
// dropped.
template <typename In, typename Assembler, typename Deliver>
class StreamReactor : public grpc::ServerBidiReactor<In, StreamReply> {
 public:
  class Replies : public ReplySink {
   public:
    explicit Replies(StreamReactor* r) : reactor_(r) {}
    void Send(StreamReply reply) override {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (reactor_ == nullptr || over_) return;
        queue_.push_back(std::move(reply));
        if (writing_) return;
        writing_ = true;
      }
      // Safe outside the lock: the reactor cannot finish while writing_.
      reactor_->StartWrite(&queue_.front());
    }
    // After a write: starts the next or, when the stream's reading is over
    // and nothing is left, finishes it.
    void WriteDone(bool ok) {
      const StreamReply* next = nullptr;
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.pop_front();
        if (!ok) over_ = true;
        if (!over_ && !queue_.empty()) {
          next = &queue_.front();
        } else {
          writing_ = false;
          queue_.clear();
          finish = reading_over_ && !finished_;
          finished_ |= finish;
          over_ |= finish;
        }
      }
      if (next != nullptr) reactor_->StartWrite(next);
      if (finish) reactor_->Finish(grpc::Status::OK);
    }
    void ReadingOver() {
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        reading_over_ = true;
        finish = !writing_ && !finished_;
        finished_ |= finish;
        over_ |= finish;
      }
      if (finish) reactor_->Finish(grpc::Status::OK);
    }
    void Detach() {
      std::lock_guard<std::mutex> lock(mu_);
      reactor_ = nullptr;
      over_ = true;
    }

   private:
    std::mutex mu_;
    StreamReactor* reactor_;
    std::deque<StreamReply> queue_;
    bool writing_ = false, reading_over_ = false, finished_ = false,
         over_ = false;
  };

  // `cuda_device`: the stage's GPU, where cuda_ipc's tensors arrive (-1:
  // the CPU).
  StreamReactor(uint32_t window, Deliver deliver, StageMetrics& metrics,
                bool backward, int cuda_device)
      : fetcher_(link::MakeFetcher(cuda_device)),
        deliver_(std::move(deliver)),
        metrics_(metrics),
        backward_(backward),
        replies_(std::make_shared<Replies>(this)) {
    replies_->Send(CreditReply(window));
    this->StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      replies_->ReadingOver();
      return;
    }
    const uint64_t id = in_.micro_batch_id();
    const int64_t message_bytes = static_cast<int64_t>(in_.ByteSizeLong());
    const uint64_t fetched = fetcher_->fetched_bytes();
    absl::Status status;
    auto whole = assembler_.Add(std::move(in_));  // takes its payload
    metrics_.Received(backward_,
                      message_bytes + static_cast<int64_t>(
                                          fetcher_->fetched_bytes() - fetched));
    if (!whole.ok()) {
      status = whole.status();
    } else if (whole->has_value()) {
      status = deliver_(std::move(**whole), replies_);
    }
    if (!status.ok()) {
      // The refused micro-batch holds no slot: its credit comes back.
      metrics_.Error(status.code());
      replies_->Send(ErrorReply(id, status));
      replies_->Send(CreditReply(1));
    }
    this->StartRead(&in_);
  }

  void OnWriteDone(bool ok) override { replies_->WriteDone(ok); }

  void OnDone() override {
    replies_->Detach();
    delete this;
  }

  void OnCancel() override {}

 private:
  In in_;
  // Reads the data channel the sender's messages name, if any (before the
  // assembler, which uses it).
  std::unique_ptr<link::PayloadFetcher> fetcher_;
  Assembler assembler_{wire::TensorLimits{}, fetcher_.get()};
  Deliver deliver_;
  StageMetrics& metrics_;
  const bool backward_;
  std::shared_ptr<Replies> replies_;
};

}  // namespace

StageServiceImpl::StageServiceImpl(StageHost* host,
                                   std::string coordinator_identity,
                                   std::string fleet_token)
    : host_(host),
      coordinator_identity_(std::move(coordinator_identity)),
      fleet_token_(std::move(fleet_token)) {}

absl::Status StageServiceImpl::CheckController(
    grpc::CallbackServerContext* context, const char* call) const {
  if (!fleet_token_.empty()) {
    if (!wire::CallCarriesToken(*context, fleet_token_)) {
      return absl::UnauthenticatedError(absl::StrCat(
          call,
          ": control calls need the fleet token (the coordinator's "
          "--fleet-token-file, the same as this server's)"));
    }
  }
  if (coordinator_identity_.empty()) return absl::OkStatus();
  return wire::RequirePeerIdentity(*context->auth_context(),
                                   coordinator_identity_, call);
}

grpc::ServerUnaryReactor* StageServiceImpl::Assign(
    grpc::CallbackServerContext* context,
    const petra::v1::AssignRequest* request,
    petra::v1::AssignResponse* response) {
  if (absl::Status s = CheckController(context, "Assign"); !s.ok())
    return Finished(context, s, host_->metrics());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  host_->Assign(*request, response, FinishLater(reactor, host_->metrics()));
  return reactor;
}

grpc::ServerUnaryReactor* StageServiceImpl::Start(
    grpc::CallbackServerContext* context,
    const petra::v1::StartRequest* request,
    petra::v1::StartResponse* /*response*/) {
  if (absl::Status s = CheckController(context, "Start"); !s.ok())
    return Finished(context, s, host_->metrics());
  return Finished(context, host_->Start(*request), host_->metrics());
}

grpc::ServerUnaryReactor* StageServiceImpl::Checkpoint(
    grpc::CallbackServerContext* context,
    const petra::v1::CheckpointRequest* request,
    petra::v1::CheckpointResponse* response) {
  if (absl::Status s = CheckController(context, "Checkpoint"); !s.ok())
    return Finished(context, s, host_->metrics());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  host_->Checkpoint(*request, response, FinishLater(reactor, host_->metrics()));
  return reactor;
}

grpc::ServerUnaryReactor* StageServiceImpl::RestoreCheckpoint(
    grpc::CallbackServerContext* context,
    const petra::v1::RestoreCheckpointRequest* request,
    petra::v1::RestoreCheckpointResponse* response) {
  if (absl::Status s = CheckController(context, "RestoreCheckpoint"); !s.ok())
    return Finished(context, s, host_->metrics());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  host_->RestoreCheckpoint(*request, response,
                           FinishLater(reactor, host_->metrics()));
  return reactor;
}

grpc::ServerUnaryReactor* StageServiceImpl::ReadCheckpoint(
    grpc::CallbackServerContext* context,
    const petra::v1::ReadCheckpointRequest* request,
    petra::v1::ReadCheckpointResponse* response) {
  if (absl::Status s = CheckController(context, "ReadCheckpoint"); !s.ok())
    return Finished(context, s, host_->metrics());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  host_->ReadCheckpoint(*request, response,
                        FinishLater(reactor, host_->metrics()));
  return reactor;
}

grpc::ServerUnaryReactor* StageServiceImpl::Release(
    grpc::CallbackServerContext* context,
    const petra::v1::ReleaseRequest* request,
    petra::v1::ReleaseResponse* /*response*/) {
  if (absl::Status s = CheckController(context, "Release"); !s.ok())
    return Finished(context, s, host_->metrics());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  host_->Release(*request, FinishLater(reactor, host_->metrics()));
  return reactor;
}

grpc::ServerUnaryReactor* StageServiceImpl::GetStatus(
    grpc::CallbackServerContext* context,
    const petra::v1::GetStatusRequest* /*request*/,
    petra::v1::StageStatus* response) {
  *response = host_->Status();
  return Finished(context, absl::OkStatus(), host_->metrics());
}

template <typename Message, typename Assembler>
grpc::ServerBidiReactor<Message, StreamReply>* StageServiceImpl::Stream(
    bool backward) {
  auto deliver = [host = host_](auto p, std::shared_ptr<ReplySink> from) {
    return host->Deliver(std::move(p), std::move(from));
  };
  return new StreamReactor<Message, Assembler, decltype(deliver)>(
      host_->window(), deliver, host_->metrics(), backward,
      host_->cuda_device());
}

grpc::ServerBidiReactor<petra::v1::ForwardMessage, StreamReply>*
StageServiceImpl::Forward(grpc::CallbackServerContext* /*context*/) {
  return Stream<petra::v1::ForwardMessage, wire::ForwardAssembler>(false);
}

grpc::ServerBidiReactor<petra::v1::BackwardMessage, StreamReply>*
StageServiceImpl::Backward(grpc::CallbackServerContext* /*context*/) {
  return Stream<petra::v1::BackwardMessage, wire::BackwardAssembler>(true);
}

}  // namespace petra::stage_server

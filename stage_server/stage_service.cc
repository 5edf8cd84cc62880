#include "stage_server/stage_service.h"

#include "absl/strings/str_cat.h"
#include "services/link/channel_factory.h"
#include "services/wire/bearer_token.h"
#include "services/wire/data_key.h"
#include "services/wire/reply_queue.h"
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

// One incoming stream. Reads one message at a time; replies are written
// one at a time (wire::ReplyQueue). The reply queue outlives the reactor
// (the mailbox holds it to send credits later); once the stream is over,
// replies are dropped. A stream whose data key the host does not admit ends
// UNAUTHENTICATED: at once when it opens, or at the message where its key
// stopped being the job's (a release); nothing of such a message is kept.
template <typename In, typename Assembler>
class StreamReactor : public grpc::ServerBidiReactor<In, StreamReply> {
 public:
  using Queue = wire::ReplyQueue<StreamReply>;
  class Replies : public ReplySink {
   public:
    explicit Replies(Queue::Stream stream)
        : queue(std::move(stream), &JoinCredits) {}
    void Send(StreamReply reply) override { queue.Push(std::move(reply)); }
    Queue queue;

   private:
    // A credit behind one still waiting to be written joins it: one
    // message instead of two.
    static bool JoinCredits(StreamReply& waiting, const StreamReply& incoming) {
      if (!incoming.has_credit() || !waiting.has_credit()) return false;
      auto* credit = waiting.mutable_credit();
      credit->set_micro_batches(credit->micro_batches() +
                                incoming.credit().micro_batches());
      return true;
    }
  };

  // `key`: the data key the stream presented, which the host admits when
  // the stream opens and at every message. cuda_ipc's tensors arrive on the
  // stage's GPU.
  StreamReactor(StageHost& host, std::string key, ReceiveBudget& budget,
                bool backward)
      : host_(host),
        key_(std::move(key)),
        fetcher_(link::MakeFetcher(host.cuda_device())),
        budget_(budget),
        metrics_(host.metrics()),
        backward_(backward),
        replies_(std::make_shared<Replies>(
            Queue::Stream{[this](const StreamReply* r) { this->StartWrite(r); },
                          [this](const grpc::Status& s) { this->Finish(s); },
                          /*reads=*/true})) {
    if (absl::Status s = host_.AdmitData(key_); !s.ok()) {
      Refuse(s, "unauthenticated");
      return;
    }
    replies_->Send(CreditReply(host_.window()));
    this->StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      replies_->queue.Close();
      return;
    }
    const uint64_t id = in_.micro_batch_id();
    const uint64_t message_bytes = in_.ByteSizeLong();
    absl::Status status = host_.AdmitData(key_);
    if (!status.ok()) {
      in_.Clear();
      Refuse(status, "unauthenticated");
      return;
    }
    status = budget_.Take(held_, message_bytes);
    if (!status.ok()) {
      // Past a limit: the stream ends (its sender is broken or hostile),
      // and what it held goes.
      in_.Clear();
      Refuse(status, "over_limit");
      return;
    }
    held_ += message_bytes;
    const uint64_t fetched = fetcher_->fetched_bytes();
    auto whole = assembler_.Add(std::move(in_));  // takes its payload
    const uint64_t fetched_now = fetcher_->fetched_bytes() - fetched;
    budget_.Add(fetched_now);
    held_ += fetched_now;
    metrics_.Received(backward_,
                      static_cast<int64_t>(message_bytes + fetched_now));
    if (!whole.ok()) {
      status = whole.status();
    } else if (whole->has_value()) {
      status = host_.Deliver(std::move(**whole), replies_);
    }
    // A whole micro-batch (delivered or refused) or a refused part: the
    // assembler holds nothing of it now.
    if (!whole.ok() || whole->has_value()) GiveBack();
    if (!status.ok()) {
      // The refused micro-batch holds no slot: its credit comes back.
      metrics_.Error(status.code());
      replies_->Send(ErrorReply(id, status));
      replies_->Send(CreditReply(1));
    }
    this->StartRead(&in_);
  }

  void OnWriteDone(bool ok) override { replies_->queue.WriteDone(ok); }

  void OnDone() override {
    GiveBack();
    replies_->queue.Detach();
    delete this;
  }

  // The peer is gone: its replies are dropped; the pending read then ends
  // (ok = false) and closes the stream.
  void OnCancel() override { replies_->queue.Cancelled(); }

 private:
  void GiveBack() {
    budget_.Give(held_);
    held_ = 0;
  }
  void Refuse(const absl::Status& why, const char* reason) {
    metrics_.DataRefused(backward_ ? "backward" : "forward", reason);
    metrics_.Error(why.code());
    GiveBack();
    replies_->queue.Close(wire::ToGrpcStatus(why));
  }

  StageHost& host_;
  const std::string key_;
  In in_;
  // Reads the data channel the sender's messages name, if any (before the
  // assembler, which uses it).
  std::unique_ptr<wire::PayloadFetcher> fetcher_;
  Assembler assembler_{wire::TensorLimits{}, fetcher_.get()};
  ReceiveBudget& budget_;
  // Bytes of the micro-batch being assembled, taken from budget_.
  uint64_t held_ = 0;
  StageMetrics& metrics_;
  const bool backward_;
  std::shared_ptr<Replies> replies_;
};

}  // namespace

StageServiceImpl::StageServiceImpl(StageHost* host,
                                   std::string coordinator_identity,
                                   std::string fleet_token,
                                   ReceiveBudget* budget)
    : host_(host),
      coordinator_identity_(std::move(coordinator_identity)),
      fleet_token_(std::move(fleet_token)),
      budget_(*budget) {}

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
    grpc::CallbackServerContext* context, bool backward) {
  return new StreamReactor<Message, Assembler>(
      *host_, wire::PresentedDataKey(*context), budget_, backward);
}

grpc::ServerBidiReactor<petra::v1::ForwardMessage, StreamReply>*
StageServiceImpl::Forward(grpc::CallbackServerContext* context) {
  return Stream<petra::v1::ForwardMessage, wire::ForwardAssembler>(context,
                                                                   false);
}

grpc::ServerBidiReactor<petra::v1::BackwardMessage, StreamReply>*
StageServiceImpl::Backward(grpc::CallbackServerContext* context) {
  return Stream<petra::v1::BackwardMessage, wire::BackwardAssembler>(context,
                                                                     true);
}

}  // namespace petra::stage_server

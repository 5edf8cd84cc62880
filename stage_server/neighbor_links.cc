#include "stage_server/neighbor_links.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "petra/v1/stage.grpc.pb.h"
#include "services/link/open_link.h"
#include "services/wire/data_key.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/stream_sender.h"
#include "stage_server/send_queue.h"

namespace petra::stage_server {
namespace {

template <typename Message>
using Sender = wire::StreamSender<Message>;

}  // namespace

// Named, not anonymous: NeighborLinks::Impl holds one, and a type with
// internal linkage inside it trips -Wsubobject-linkage in a unity build.
namespace outbox_internal {

// The stage's outbox: hands micro-batches to the send queues, whose
// threads encode them onto the streams to its neighbours, and reports
// completions on the coordinator's streams.
class NeighborOutbox : public engine::StageOutbox {
 public:
  // `next` and `previous` are null where the stage has no such neighbour.
  NeighborOutbox(StageJob& job, const PassInfo& pass,
                 const link::ForwardLink* next,
                 const link::BackwardLink* previous, StageMetrics& metrics,
                 std::function<void()> after_each)
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
  void Idle(double seconds) override { metrics_.Idle(job_.index(), seconds); }
  void Sending(double seconds) override {
    metrics_.Sending(job_.index(), seconds);
  }

  absl::Status SendForward(model::ForwardBatch item) override {
    item.header = Header(item.id());
    return Queue(forward_queue_, std::move(item), next_, false);
  }

  absl::Status SendBackward(model::BackwardBatch item) override {
    item.header = Header(item.id());
    return Queue(backward_queue_, std::move(item), previous_, true);
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
  // Starts the payload's copy back to the host on the copy stream (the
  // stage computes on meanwhile), where it is on the device, and queues its
  // encoding and sending, which wait for that copy. A link that carries
  // device memory (cuda_ipc) waits for the computation instead.
  template <typename Payload, typename Message>
  absl::Status Queue(SendQueue& queue, Payload p,
                     const link::PayloadLink<Payload, Message>* to,
                     bool backward) {
    engine::Transfer copied;  // none: the tensors are on the host
    if (p.home == model::TensorHome::kDevice) {
      const bool device_link = to != nullptr && to->keeps_device();
      absl::StatusOr<engine::Transfer> started =
          device_link ? job_.transfer.Computed(p.header.micro_batch_id)
                      : job_.transfer.ToHost(wire::TensorsOf(p),
                                             p.header.micro_batch_id);
      if (!started.ok()) return started.status();
      copied = std::move(*started);
      if (!device_link) p.home = model::TensorHome::kPinnedHost;
    }
    after_each_();
    return queue.Push([this, p = std::move(p), copied = std::move(copied), to,
                       backward]() mutable -> absl::Status {
      copied.Wait();
      auto sent = to->Send(p);
      if (!sent.ok()) return sent.status();
      metrics_.Sent(backward, sent->transport, sent->bytes);
      return absl::OkStatus();
    });
  }

  model::MicroBatchHeader Header(int64_t id) const {
    model::MicroBatchHeader h;
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
  const link::ForwardLink* next_;
  const link::BackwardLink* previous_;
  StageMetrics& metrics_;
  std::function<void()> after_each_;
  // Two micro-batches may wait per direction: enough to cover one tick's
  // compute, while the receiver's credits bound what is in flight.
  SendQueue forward_queue_{2};
  SendQueue backward_queue_{2};
};

}  // namespace outbox_internal
using outbox_internal::NeighborOutbox;

namespace {

// A stream to stage `stage`, presenting its data key.
template <typename Message, typename Open>
std::unique_ptr<Sender<Message>> Connect(
    int stage, const std::string& address, const std::string& data_key,
    const wire::TransportSecurity& security, Open open) {
  std::shared_ptr<petra::v1::StageService::Stub> stub =
      petra::v1::StageService::NewStub(wire::CreateChannel(address, security));
  return std::make_unique<Sender<Message>>(
      absl::StrCat("stage ", stage, " (", address, ")"),
      [stub, open, data_key](grpc::ClientContext* c) {
        wire::PresentDataKey(c, data_key);
        return open(*stub, c);
      });
}

}  // namespace

struct NeighborLinks::Impl {
  std::unique_ptr<Sender<petra::v1::ForwardMessage>> next;
  std::unique_ptr<Sender<petra::v1::BackwardMessage>> previous;
  // What the outbox hands payloads to: the streams with their data
  // channels.
  std::unique_ptr<link::ForwardLink> up_link;
  std::unique_ptr<link::BackwardLink> down_link;
  std::unique_ptr<NeighborOutbox> outbox;
  absl::Status error;  // a data channel that could not be made
};

NeighborLinks::NeighborLinks(StageJob& job, const PassInfo& pass,
                             const wire::TransportSecurity& security,
                             StageMetrics& metrics,
                             std::function<void()> after_each)
    : impl_(std::make_unique<Impl>()) {
  const petra::v1::Transport wanted = job.assign.spec().transport();
  const int gpu = job.transfer.device().is_cuda()
                      ? std::max<int>(0, job.transfer.device().index())
                      : -1;
  if (job.index() + 1 < job.count()) {
    impl_->next = Connect<petra::v1::ForwardMessage>(
        job.index() + 1, job.assign.next_address(), job.assign.next_data_key(),
        security, [](petra::v1::StageService::Stub& s, grpc::ClientContext* c) {
          return s.Forward(c);
        });
    absl::StatusOr<std::unique_ptr<link::ForwardLink>> up =
        link::OpenForwardLink(
            {job.assign.next_transport(), wanted, job.assign.next_address(),
             security, gpu, job.assign.next_data_key()},
            [s = impl_->next.get()](const auto& parts) {
              return s->Send(parts);
            },
            [s = impl_->next.get()] { return s->health(); });
    if (up.ok()) impl_->up_link = std::move(*up);
    impl_->error.Update(up.status());
  }
  // Every pass but an evaluation sends gradients down.
  if (pass.phase != petra::v1::PHASE_EVAL && job.index() > 0) {
    impl_->previous = Connect<petra::v1::BackwardMessage>(
        job.index() - 1, job.assign.previous_address(),
        job.assign.previous_data_key(), security,
        [](petra::v1::StageService::Stub& s, grpc::ClientContext* c) {
          return s.Backward(c);
        });
    absl::StatusOr<std::unique_ptr<link::BackwardLink>> down =
        link::OpenBackwardLink(
            {job.assign.previous_transport(), wanted,
             job.assign.previous_address(), security, gpu,
             job.assign.previous_data_key()},
            [s = impl_->previous.get()](const auto& parts) {
              return s->Send(parts);
            },
            [s = impl_->previous.get()] { return s->health(); });
    if (down.ok()) impl_->down_link = std::move(*down);
    impl_->error.Update(down.status());
  }
  impl_->outbox = std::make_unique<NeighborOutbox>(
      job, pass, impl_->up_link.get(), impl_->down_link.get(), metrics,
      std::move(after_each));
}

NeighborLinks::~NeighborLinks() {
  // The outbox's send threads use the streams: they go first.
  impl_->outbox.reset();
}

engine::StageOutbox& NeighborLinks::outbox() { return *impl_->outbox; }

void NeighborLinks::Cancel() {
  if (impl_->up_link) impl_->up_link->Cancel();
  if (impl_->down_link) impl_->down_link->Cancel();
  if (impl_->next) impl_->next->Cancel();
  if (impl_->previous) impl_->previous->Cancel();
}

absl::Status NeighborLinks::status() const { return impl_->error; }

absl::Status NeighborLinks::Finish(absl::Status status) {
  // A failed pass cancels the streams first, so queued sends end at once.
  if (!status.ok()) Cancel();
  if (absl::Status sent = impl_->outbox->Flush(); status.ok()) status = sent;
  if (!status.ok()) Cancel();
  for (absl::Status s :
       {impl_->next ? impl_->next->Close() : absl::OkStatus(),
        impl_->previous ? impl_->previous->Close() : absl::OkStatus()}) {
    if (status.ok() && !s.ok()) status = s;
  }
  return status;
}

}  // namespace petra::stage_server

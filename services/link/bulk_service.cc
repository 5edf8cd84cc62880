#include "services/link/bulk_service.h"

#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "services/base/constant_time.h"
#include "services/link/bulk_frame.h"
#include "services/wire/data_key.h"

namespace petra::link {
namespace {

grpc::ByteBuffer AckBuffer(const DecodedBulkFrame& f) {
  petra::v1::BulkAck ack;
  ack.set_sequence(f.header.sequence);
  ack.set_offset(f.header.offset);
  ack.set_bytes(f.bytes);
  grpc::Slice s(ack.SerializeAsString());
  return grpc::ByteBuffer(&s, 1);
}

// One stream: reads frames, writes one acknowledgement each (one write in
// flight, the rest queued), finishes once reading is over and the queue is
// empty.
class PushReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  PushReactor(BulkInbox& inbox, const BulkReceiver::Admission& admit,
              std::string key)
      : inbox_(inbox), admit_(admit), key_(std::move(key)) {
    if (absl::Status s = admit_(key_); !s.ok()) {
      Refuse(s);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(grpc::Status::OK);
      return;
    }
    // Each frame: the job may have been released since the stream opened.
    if (absl::Status s = admit_(key_); !s.ok()) {
      in_.Clear();
      Refuse(s);
      return;
    }
    absl::StatusOr<DecodedBulkFrame> frame = DecodeBulkFrame(
        in_,
        [this](const BulkFrameHeader& h,
               uint64_t bytes) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
          if (!link_) {
            link_ = h.link;
            inbox_.Opened(h.link);
          } else if (*link_ != h.link) {
            return absl::InvalidArgumentError(
                "bulk frames of two links on one stream");
          }
          return inbox_.Reserve(h.link, h.sequence, h.total_bytes,
                                h.payload_bytes, h.offset, bytes);
        });
    in_.Clear();
    if (!frame.ok()) {
      End(grpc::Status(
          frame.status().code() == absl::StatusCode::kResourceExhausted
              ? grpc::StatusCode::RESOURCE_EXHAUSTED
              : grpc::StatusCode::INVALID_ARGUMENT,
          std::string(frame.status().message())));
      return;
    }
    inbox_.Arrived(frame->header.link, frame->header.sequence, frame->bytes);
    Queue(AckBuffer(*frame));
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    grpc::ByteBuffer* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      acks_.pop_front();
      if (!ok) acks_.clear();  // the stream broke: OnReadDone(false) follows
      if (!acks_.empty()) {
        next = &acks_.front();
      } else {
        writing_ = false;
        finish = TakeFinishLocked();
      }
    }
    // Outside the lock: gRPC may run the next reaction on this thread.
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(*finish);
  }

  void OnDone() override {
    if (link_) inbox_.Closed(*link_);
    delete this;
  }

 private:
  void Refuse(const absl::Status& why) {
    End(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                     std::string(why.message())));
  }

  void Queue(grpc::ByteBuffer ack) {
    grpc::ByteBuffer* first = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      acks_.push_back(std::move(ack));  // keeps references to the others
      if (writing_) return;
      writing_ = true;
      first = &acks_.front();
    }
    StartWrite(first);
  }

  // Finishes now if no acknowledgement is being written, else once the
  // last one is.
  void End(grpc::Status status) {
    std::optional<grpc::Status> finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ending_) return;
      ending_ = std::move(status);
      if (!writing_) finish = TakeFinishLocked();
    }
    if (finish) Finish(*finish);
  }

  std::optional<grpc::Status> TakeFinishLocked() {
    if (!ending_ || finished_) return std::nullopt;
    finished_ = true;
    return ending_;
  }

  BulkInbox& inbox_;
  const BulkReceiver::Admission& admit_;
  const std::string key_;
  grpc::ByteBuffer in_;
  std::optional<uint64_t> link_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> acks_;  // front: being written
  bool writing_ = false;
  std::optional<grpc::Status> ending_;
  bool finished_ = false;
};

}  // namespace

BulkReceiver::Admission BulkReceiver::KeyIs(std::string key) {
  return [key = std::move(key)](const std::string& presented) {
    return base::ConstantTimeEquals(presented, key)
               ? absl::OkStatus()
               : absl::UnauthenticatedError("not the data key of this link");
  };
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* BulkReceiver::Push(
    grpc::CallbackServerContext* context) {
  return new PushReactor(inbox_, admit_, wire::PresentedDataKey(*context));
}

}  // namespace petra::link

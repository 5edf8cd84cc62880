// The sending end of a Forward or Backward stream: writes one micro-batch's
// messages when the receiver has granted a credit, and reads the receiver's
// replies on its own thread (credits, per-message errors, completions).
// Blocking by design: it is called from a stage's executor or the
// coordinator's feed thread, never from a gRPC reaction.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "petra/v1/stage.grpc.pb.h"
#include "services/wire/status_map.h"

namespace petra::wire {

template <typename Message>
class StreamSender {
 public:
  using Stream = grpc::ClientReaderWriter<Message, petra::v1::StreamReply>;
  using Opener = std::function<std::unique_ptr<Stream>(grpc::ClientContext*)>;
  using OnDone = std::function<void(const petra::v1::MicroBatchDone&)>;

  // `peer` names the receiver in errors ("stage 2 (127.0.0.1:4000)").
  // `on_done` runs on the reader thread for every completion reported.
  StreamSender(std::string peer, Opener open, OnDone on_done = nullptr)
      : peer_(std::move(peer)), on_done_(std::move(on_done)) {
    stream_ = open(&context_);
    reader_ = std::thread([this] { ReadReplies(); });
  }

  ~StreamSender() {
    Cancel();
    Close().IgnoreError();
  }

  // Sends the parts of one micro-batch once a credit is available. Fails
  // with the receiver's refusal, or when the stream broke or was cancelled.
  absl::Status Send(const std::vector<Message>& parts) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return credits_ > 0 || !error_.ok() || ended_; });
      if (!error_.ok()) return error_;
      if (ended_) return Broken();
      --credits_;
    }
    for (const Message& m : parts) {
      if (!stream_->Write(m)) {
        std::unique_lock<std::mutex> lock(mu_);
        // The reader thread records why the stream ended.
        cv_.wait_for(lock, std::chrono::seconds(5), [&] { return ended_; });
        return error_.ok() ? Broken() : error_;
      }
    }
    return absl::OkStatus();
  }

  // OK while the stream is usable; otherwise why it is not.
  absl::Status health() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    return ended_ ? Broken() : absl::OkStatus();
  }

  // Half-closes, waits for the receiver to finish the stream and returns
  // its final status (or the first refusal it sent).
  absl::Status Close() {
    if (closed_) return final_;
    closed_ = true;
    stream_->WritesDone();
    if (reader_.joinable()) reader_.join();
    grpc::Status s = stream_->Finish();
    std::lock_guard<std::mutex> lock(mu_);
    final_ = !error_.ok() ? error_ : FromGrpcStatus(s);
    if (!final_.ok() && s.error_code() != grpc::StatusCode::OK && error_.ok()) {
      final_ = absl::Status(final_.code(),
                            absl::StrCat(peer_, ": ", final_.message()));
    }
    return final_;
  }

  // Aborts the stream from any thread; blocked Send/WaitFor calls return.
  void Cancel() { context_.TryCancel(); }

 private:
  absl::Status Broken() const {
    return absl::UnavailableError(
        absl::StrCat("the stream to ", peer_, " ended"));
  }

  void ReadReplies() {
    petra::v1::StreamReply reply;
    while (stream_->Read(&reply)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (reply.has_credit()) {
        credits_ += reply.credit().micro_batches();
      } else if (reply.has_error()) {
        if (error_.ok()) {
          absl::Status e = FromProtoStatus(reply.error().status());
          error_ = absl::Status(
              e.code(),
              absl::StrCat(peer_, " refused micro-batch ",
                           reply.error().micro_batch_id(), ": ", e.message()));
        }
      } else if (reply.has_done() && on_done_) {
        on_done_(reply.done());
      }
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  const std::string peer_;
  const OnDone on_done_;
  grpc::ClientContext context_;
  std::unique_ptr<Stream> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t credits_ = 0;
  absl::Status error_;
  bool ended_ = false;
  bool closed_ = false;
  absl::Status final_;
};

}  // namespace petra::wire

// The messages a server reactor writes, queued and written one at a time
// (gRPC's callback API allows one write in flight), for both servers'
// streams: a job's events to a watching client, a stage's replies to the
// stage that streams to it. Whoever produces them (a job record, a stage's
// mailbox) holds the queue and may outlive the reactor: once the stream is
// over, messages are dropped.
//
// The stream finishes once it is closed and nothing is being written:
// closed by Close (its reads are over, or the server ends it), by a message
// pushed as the last, or, for a stream that only writes, by the peer going
// away (OnCancel, or a failed write). A stream that also reads finishes
// only after Close: its pending read completes (with ok = false once the
// peer is gone) and the reactor closes then, so no read is started after
// Finish. gRPC needs Finish even on a cancelled call: without it the call
// is never freed and Server::Shutdown waits for it forever.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace petra::wire {

template <typename Message>
class ReplyQueue {
 public:
  // The reactor's side, called outside the queue's lock.
  struct Stream {
    std::function<void(const Message*)> start_write;
    std::function<void(const grpc::Status&)> finish;
    // Whether the reactor reads too (a bidirectional stream): then only
    // Close finishes it.
    bool reads = false;
  };
  // Folds `incoming` into `waiting`, the last queued message that is not
  // being written, and returns true; false queues it after.
  using Merge = std::function<bool(Message& waiting, const Message& incoming)>;

  explicit ReplyQueue(Stream stream, Merge merge = nullptr)
      : stream_(std::move(stream)), merge_(std::move(merge)) {}

  // Queues `message`; with `last`, the stream finishes OK after it. After
  // Close a message is still written while an earlier write is in flight
  // (the stream finishes after the last), and dropped once it finished.
  void Push(Message message, bool last = false) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (detached_ || over_ || finished_) return;
      // The front is the write in flight: never merged into.
      if (merge_ && queue_.size() > 1 && merge_(queue_.back(), message)) {
        closed_ |= last;
        return;
      }
      queue_.push_back(std::move(message));
      closed_ |= last;
      if (writing_) return;
      writing_ = true;
    }
    // Safe outside the lock: the stream cannot finish while writing_.
    stream_.start_write(&queue_.front());
  }

  // No more messages: the stream finishes with `status` once those queued
  // are written (at once when none is).
  void Close(grpc::Status status = grpc::Status::OK) {
    bool finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!closed_) final_ = std::move(status);
      closed_ = true;
      finish = ShouldFinishLocked();
    }
    if (finish) stream_.finish(final_);
  }

  // The reactor's OnWriteDone: the next write, or the finish.
  void WriteDone(bool ok) {
    const Message* next = nullptr;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      if (!ok) PeerGoneLocked();
      if (!over_ && !queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        queue_.clear();
        finish = ShouldFinishLocked();
      }
    }
    if (next != nullptr) stream_.start_write(next);
    if (finish) stream_.finish(final_);
  }

  // The reactor's OnCancel: the peer is gone. What is queued is dropped; a
  // stream that only writes finishes now unless a write is in flight (its
  // failed WriteDone finishes it).
  void Cancelled() {
    bool finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PeerGoneLocked();
      if (!writing_) queue_.clear();
      finish = ShouldFinishLocked();
    }
    if (finish) stream_.finish(final_);
  }

  // The reactor's OnDone: nothing reaches it any more.
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    detached_ = true;
  }

 private:
  void PeerGoneLocked() {
    if (!over_ && !closed_) {
      final_ = grpc::Status(grpc::StatusCode::CANCELLED, "the peer went away");
    }
    over_ = true;
    if (!stream_.reads) closed_ = true;
  }
  bool ShouldFinishLocked() {
    const bool finish = closed_ && !writing_ && !finished_ && !detached_;
    finished_ |= finish;
    return finish;
  }

  const Stream stream_;
  const Merge merge_;
  std::mutex mu_;
  std::deque<Message> queue_;
  grpc::Status final_;
  bool writing_ = false;   // a write in flight (queue_.front())
  bool closed_ = false;    // no more messages: finish when written
  bool over_ = false;      // the peer is gone: nothing more is written
  bool finished_ = false;  // Finish called
  bool detached_ = false;  // OnDone ran: the reactor is gone
};

}  // namespace petra::wire

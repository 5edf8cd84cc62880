// Sends a stage's outgoing micro-batches on a thread of their own, in
// order, so the executor goes on computing while a micro-batch is encoded,
// waits for a credit and crosses the network (the transport is otherwise on
// the compute path of every tick). At most `capacity` wait in the queue;
// the receiver's credits still bound what is in flight.
#pragma once

#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "services/engine/blocking_queue.h"

namespace petra::stage_server {

class SendQueue {
 public:
  explicit SendQueue(size_t capacity) : tasks_(capacity) {
    thread_ = std::thread([this] {
      while (std::optional<std::function<absl::Status()>> task = tasks_.Pop()) {
        if (!error().ok()) continue;  // drop what follows a failure
        absl::Status s = (*task)();
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          if (error_.ok()) error_ = s;
        }
      }
    });
  }
  ~SendQueue() { Flush().IgnoreError(); }
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // Queues a send; returns the first error of an earlier one, if any (the
  // caller stops the pass then, as it would for its own send).
  absl::Status Push(std::function<absl::Status()> send) {
    if (absl::Status s = error(); !s.ok()) return s;
    if (!tasks_.Push(std::move(send))) {
      return absl::FailedPreconditionError("the send queue is closed");
    }
    return absl::OkStatus();
  }

  // Waits until everything queued was sent; the first error. No Push after.
  absl::Status Flush() {
    tasks_.Close();
    if (thread_.joinable()) thread_.join();
    return error();
  }

 private:
  absl::Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  engine::BlockingQueue<std::function<absl::Status()>> tasks_;
  std::mutex mu_;
  absl::Status error_;
  std::thread thread_;
};

}  // namespace petra::stage_server

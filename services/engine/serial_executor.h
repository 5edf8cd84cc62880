// One thread that runs posted tasks in order: where work goes that a gRPC
// reaction must not do itself (torch work on a stage, file reads for a
// checkpoint or an export). No torch, no gRPC.
#pragma once

#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "services/engine/blocking_queue.h"

namespace petra::engine {

class SerialExecutor {
 public:
  // `on_start` runs first on the thread (e.g. its torch thread count).
  explicit SerialExecutor(std::function<void()> on_start = nullptr,
                          size_t capacity = 1 << 16)
      : tasks_(capacity) {
    thread_ = std::thread([this, on_start = std::move(on_start)] {
      if (on_start) on_start();
      while (std::optional<std::function<void()>> task = tasks_.Pop()) {
        (*task)();
      }
    });
  }
  // Runs what was posted, then stops.
  ~SerialExecutor() {
    tasks_.Close();
    if (thread_.joinable()) thread_.join();
  }
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // False once the executor is stopping (the task will not run).
  bool Post(std::function<void()> task) { return tasks_.Push(std::move(task)); }

 private:
  BlockingQueue<std::function<void()>> tasks_;
  std::thread thread_;
};

}  // namespace petra::engine

// Queues joining J stages in one process, for tests that drive the stage
// executor (RunStageOps) with ops of their own: stage 0 forwards what
// `feed` makes, and each stage's waits and work reach the pipe's hooks.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "services/engine/blocking_queue.h"
#include "services/engine/stage_io.h"

namespace petra::engine::stage_testing {

class StagePipe {
 public:
  // Stage 0's input for micro-batch `id`.
  using Feed = std::function<ForwardBatch(int64_t id)>;
  StagePipe(int stages, Feed feed) : feed_(std::move(feed)) {
    for (int j = 0; j < stages; ++j) {
      // Deep enough for any flush the tests run: the queues never block.
      up_.push_back(std::make_unique<BlockingQueue<ForwardBatch>>(4096));
      down_.push_back(std::make_unique<BlockingQueue<BackwardBatch>>(4096));
    }
  }

  // What stage j's outbox hears (each called on stage j's thread only).
  std::function<void(int j, double seconds)> on_idle;
  std::function<void(int j, const StageOutbox::Work& work)> on_observe;

  class Ends : public StageInbox, public StageOutbox {
   public:
    Ends(StagePipe& p, int j) : p_(p), j_(j) {}
    absl::StatusOr<ForwardBatch> NextForward(int64_t id) override {
      if (j_ == 0) return p_.feed_(id);
      return *p_.up_[j_ - 1]->Pop();
    }
    absl::StatusOr<BackwardBatch> NextBackward(int64_t) override {
      return *p_.down_[j_]->Pop();
    }
    absl::Status SendForward(ForwardBatch item) override {
      p_.up_[j_]->Push(std::move(item));
      return absl::OkStatus();
    }
    absl::Status SendBackward(BackwardBatch item) override {
      p_.down_[j_ - 1]->Push(std::move(item));
      return absl::OkStatus();
    }
    void ReportLoss(int64_t, const LossOutput&) override {}
    void Idle(double seconds) override {
      if (p_.on_idle) p_.on_idle(j_, seconds);
    }
    void Observe(const Work& w) override {
      if (p_.on_observe) p_.on_observe(j_, w);
    }

   private:
    StagePipe& p_;
    const int j_;
  };

 private:
  const Feed feed_;
  std::vector<std::unique_ptr<BlockingQueue<ForwardBatch>>> up_;
  std::vector<std::unique_ptr<BlockingQueue<BackwardBatch>>> down_;
};

}  // namespace petra::engine::stage_testing

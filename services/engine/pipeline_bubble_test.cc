// The bubble the executor measures (idle: waiting for the next operation's
// input), on stages of a synthetic cost: ops that sleep a fixed time, so
// four stages share two cores without sharing their time.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "services/engine/stage_io.h"
#include "services/engine/stage_mode_ops.h"
#include "services/engine/stage_pipe_test_support.h"
#include "services/engine/stage_worker_test_support.h"

namespace petra::engine {
namespace {

using std::chrono::milliseconds;

// Forward f, backward b, the last stage's loss step f + b; what goes on is
// what came in.
class SleepOps : public StageOps {
 public:
  explicit SleepOps(milliseconds step) : step_(step) {}
  absl::StatusOr<ForwardBatch> Forward(StageWorker&, ForwardBatch& in,
                                       int64_t) override {
    std::this_thread::sleep_for(step_);
    return model::ForwardOf(in.id(), in.x);
  }
  absl::StatusOr<LossOutput> Loss(StageWorker&, ForwardBatch& in,
                                  int64_t) override {
    std::this_thread::sleep_for(2 * step_);
    LossOutput out;
    out.backward.input = in.x;
    out.backward.input_grad = in.x;
    return out;
  }
  std::optional<BackwardBatch> LossDown(const StageWorker&, int64_t m,
                                        LossOutput& out) override {
    return model::BackwardOf(m, out.backward.input, out.backward.input_grad);
  }
  absl::StatusOr<BackwardOutput> Backward(StageWorker&, BackwardBatch& in,
                                          int64_t) override {
    std::this_thread::sleep_for(step_);
    BackwardOutput out;
    out.input = in.output;
    out.input_grad = in.grad;
    return out;
  }
  BackwardBatch Down(int64_t m, BackwardBatch&, BackwardOutput& out) override {
    return model::BackwardOf(m, out.input, out.input_grad);
  }
  bool monitored() const override { return true; }

 private:
  const milliseconds step_;
};

// Each operation of one stage as its outbox heard of it, in order: the
// wait before it and its compute.
struct TimedOp {
  double idle = 0;
  double compute = 0;
};

// Runs `micro_batches` through J = 4 sleeping stages in `schedule`'s order;
// each stage's operations.
std::vector<std::vector<TimedOp>> RunSleeping(
    schedule::ScheduleKind schedule, int64_t group, int64_t micro_batches,
    std::vector<double>* idle_counted) {
  const int stages = 4;
  std::vector<std::unique_ptr<StageWorker>> workers = stage_testing::Workers(
      stage_testing::Job(petra::v1::ARCHITECTURE_REVNET18, 1),
      {{0, 1}, {1, 2}, {2, 3}, {3, 10}});
  stage_testing::StagePipe pipe(stages, [](int64_t id) {
    return model::ForwardOf(id, {torch::zeros({1}), {}});
  });
  std::vector<std::vector<TimedOp>> timed(stages);
  pipe.on_idle = [&](int j, double seconds) {
    timed[j].push_back({seconds, 0});
  };
  // The loss step's backward is reported apart, with no time.
  pipe.on_observe = [&](int j, const StageOutbox::Work& w) {
    if (w.seconds > 0) timed[j].back().compute += w.seconds;
  };
  // Long enough that a late wake-up on a loaded machine is a small share.
  SleepOps ops(milliseconds(8));
  std::vector<std::thread> threads;
  std::mutex mu;
  absl::Status failed;
  for (int j = 0; j < stages; ++j) {
    threads.emplace_back([&, j] {
      stage_testing::StagePipe::Ends ends(pipe, j);
      absl::Status s = RunStageOps(*workers[j], ops, schedule, group, ends,
                                   ends, micro_batches);
      std::lock_guard<std::mutex> lock(mu);
      if (failed.ok()) failed = s;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(failed.ok()) << failed;
  for (int j = 0; j < stages; ++j) {
    idle_counted->push_back(workers[j]->idle_seconds());
  }
  return timed;
}

double Bubble(const std::vector<TimedOp>& ops, size_t begin, size_t end) {
  double idle = 0, total = 0;
  for (size_t i = begin; i < end && i < ops.size(); ++i) {
    idle += ops[i].idle;
    total += ops[i].idle + ops[i].compute;
  }
  return total > 0 ? idle / total : 0;
}

// GPipe's bubble, J = 4, flushes of M = 8: (J - 1) / (M + J - 1) of each
// stage's time, over five flushes (each flush's wait for the one before is
// the next flush's idle time).
TEST(PipelineBubble, GpipeIdlesItsFormulasShare) {
  std::vector<double> counted;
  const std::vector<std::vector<TimedOp>> ops =
      RunSleeping(schedule::ScheduleKind::kGpipe, 8, 5 * 8, &counted);
  double idle = 0, total = 0;
  for (size_t j = 0; j < ops.size(); ++j) {
    for (const TimedOp& op : ops[j]) {
      idle += op.idle;
      total += op.idle + op.compute;
    }
    // What the worker counted is what the outbox heard.
    double heard = 0;
    for (const TimedOp& op : ops[j]) heard += op.idle;
    EXPECT_NEAR(counted[j], heard, 1e-9) << "stage " << j;
  }
  EXPECT_NEAR(idle / total, 3.0 / 11, 0.05);
}

// PETRA once full: every stage has an operation to run at every tick. The
// steady ticks have no slack, so a late wake-up anywhere shows downstream:
// the stages together, not each, are held near 0.
TEST(PipelineBubble, PetraIdlesLittleOnceFull) {
  std::vector<double> counted;
  const std::vector<std::vector<TimedOp>> ops =
      RunSleeping(schedule::ScheduleKind::kPetra, 1, 48, &counted);
  const size_t warm = 2 * 4;  // ops of the filling ticks, and the draining
  double idle = 0, total = 0;
  for (size_t j = 0; j < ops.size(); ++j) {
    ASSERT_GT(ops[j].size(), 2 * warm) << "stage " << j;
    for (size_t i = warm; i < ops[j].size() - warm; ++i) {
      idle += ops[j][i].idle;
      total += ops[j][i].idle + ops[j][i].compute;
    }
    // The filling ticks wait.
    EXPECT_GT(counted[j], 0) << "stage " << j;
  }
  // A tenth at most, against GPipe's 3/11 on the same stages.
  EXPECT_LT(idle / total, 0.1);
  // The top stage waits 3 ticks for its first input: the whole pass idles
  // more than its full ticks.
  EXPECT_GT(Bubble(ops[3], 0, ops[3].size()),
            Bubble(ops[3], warm, ops[3].size() - warm));
}

}  // namespace
}  // namespace petra::engine

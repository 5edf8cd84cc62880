#include "services/engine/in_process_runner.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/data/batches.h"
#include "services/engine/blocking_queue.h"
#include "services/engine/job_plan.h"
#include "services/engine/stage_io.h"

namespace petra::engine {
namespace {

using model::TensorPair;

}  // namespace

absl::StatusOr<std::unique_ptr<InProcessRunner>> InProcessRunner::Create(
    const petra::v1::JobSpec& resolved, data::Splits data,
    RunnerOptions options) {
  std::unique_ptr<InProcessRunner> r(new InProcessRunner());
  r->spec_ = resolved;
  r->data_ = std::move(data);
  r->options_ = std::move(options);
  absl::StatusOr<int64_t> steps =
      StepsPerEpoch(resolved, r->data_.train.size());
  if (!steps.ok()) return steps.status();
  r->steps_per_epoch_ = *steps;
  absl::StatusOr<std::vector<model::BlockRange>> ranges = PlanStages(resolved);
  if (!ranges.ok()) return ranges.status();
  r->ranges_ = std::move(*ranges);
  absl::StatusOr<std::vector<std::unique_ptr<StageWorker>>> workers =
      BuildStageWorkers(resolved, r->ranges_, r->steps_per_epoch_);
  if (!workers.ok()) return workers.status();
  r->workers_ = std::move(*workers);
  return r;
}

InProcessRunner::~InProcessRunner() = default;

namespace {

// The queues joining the stages of one epoch. up[j] carries stage j's
// output to stage j + 1; down[j] carries into stage j from stage j + 1;
// `labels` carries the data's labels from the feed to the last stage.
struct Channels {
  Channels(int stages, int64_t micro_batches)
      : labels(static_cast<size_t>(micro_batches) + 1) {
    const size_t capacity = static_cast<size_t>(2 * stages + 2);
    for (int j = 0; j < stages; ++j) {
      up.push_back(std::make_unique<BlockingQueue<ForwardItem>>(capacity));
      down.push_back(std::make_unique<BlockingQueue<BackwardItem>>(capacity));
    }
  }
  void Close() {
    for (auto& q : up) q->Close();
    for (auto& q : down) q->Close();
    labels.Close();
  }
  std::vector<std::unique_ptr<BlockingQueue<ForwardItem>>> up;
  std::vector<std::unique_ptr<BlockingQueue<BackwardItem>>> down;
  BlockingQueue<torch::Tensor> labels;
};

absl::Status Closed() { return absl::CancelledError("the run is stopping"); }

class QueueInbox : public StageInbox {
 public:
  QueueInbox(int stage, int stages, Channels& c,
             const data::EpochBatches& batches)
      : stage_(stage), stages_(stages), c_(c), batches_(batches) {}

  absl::StatusOr<ForwardItem> NextForward(int64_t id) override {
    ForwardItem item;
    if (stage_ == 0) {
      // The data feed: the batch, and its labels for the last stage.
      data::Batch b = batches_.Get(id);
      item = {id, {b.images, {}}, {}};
      if (stages_ == 1) {
        item.labels = b.labels;
      } else if (!c_.labels.Push(b.labels)) {
        return Closed();
      }
      return item;
    }
    std::optional<ForwardItem> in = c_.up[stage_ - 1]->Pop();
    if (!in) return Closed();
    item = std::move(*in);
    if (stage_ == stages_ - 1) {
      std::optional<torch::Tensor> labels = c_.labels.Pop();
      if (!labels) return Closed();
      item.labels = std::move(*labels);
    }
    return item;
  }

  absl::StatusOr<BackwardItem> NextBackward(int64_t id) override {
    std::optional<BackwardItem> in = c_.down[stage_]->Pop();
    if (!in) return Closed();
    return std::move(*in);
  }

 private:
  const int stage_, stages_;
  Channels& c_;
  const data::EpochBatches& batches_;
};

class QueueOutbox : public StageOutbox {
 public:
  QueueOutbox(int stage, Channels& c,
              std::function<void(int64_t, const LossOutput&)> loss)
      : stage_(stage), c_(c), loss_(std::move(loss)) {}
  absl::Status SendForward(ForwardItem item) override {
    return c_.up[stage_]->Push(std::move(item)) ? absl::OkStatus() : Closed();
  }
  absl::Status SendBackward(BackwardItem item) override {
    return c_.down[stage_ - 1]->Push(std::move(item)) ? absl::OkStatus()
                                                      : Closed();
  }
  void ReportLoss(int64_t id, const LossOutput& loss) override {
    loss_(id, loss);
  }

 private:
  const int stage_;
  Channels& c_;
  std::function<void(int64_t, const LossOutput&)> loss_;
};

}  // namespace

absl::StatusOr<EpochReport> InProcessRunner::RunEpoch(int epoch) {
  const int stages = stage_count();
  const bool overlap =
      spec_.training().mode() != petra::v1::TRAINING_MODE_BACKPROP;
  data::EpochBatches batches(data_.train, TrainBatchOptions(spec_), epoch - 1);
  const int64_t micro_batches =
      TrainMicroBatches(spec_, batches.size(), workers_[0]->optimizer_steps());

  Channels channels(stages, micro_batches);
  std::mutex mu;
  absl::Status failure;
  double loss_sum = 0;
  int64_t correct = 0, samples = 0;
  auto on_loss = [&](int64_t id, const LossOutput& out) {
    {
      std::lock_guard<std::mutex> lock(mu);
      loss_sum += out.loss;
      correct += out.correct;
      samples += out.samples;
    }
    if (options_.on_step) options_.on_step({id, out.loss});
  };
  const int threads =
      options_.threads_per_stage > 0
          ? options_.threads_per_stage
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                            stages);
  auto run_stage = [&](int j) {
    at::set_num_threads(threads);
    QueueInbox inbox(j, stages, channels, batches);
    QueueOutbox outbox(j, channels, on_loss);
    absl::Status s =
        RunStageEpoch(*workers_[j], inbox, outbox, micro_batches, overlap);
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        // The first real error wins; the others only saw the shutdown.
        if (failure.ok() && !absl::IsCancelled(s)) {
          failure = absl::Status(s.code(),
                                 absl::StrCat("stage ", j, ": ", s.message()));
        }
      }
      channels.Close();
    }
  };

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads_list;
  for (int j = 0; j < stages; ++j) threads_list.emplace_back(run_stage, j);
  for (std::thread& t : threads_list) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (!failure.ok()) return failure;

  EpochReport report;
  report.epoch = epoch;
  report.train_seconds = seconds;
  report.train_loss = micro_batches > 0 ? loss_sum / micro_batches : 0;
  report.train_accuracy =
      samples > 0 ? static_cast<double>(correct) / samples : 0;
  report.samples_per_second = seconds > 0 ? samples / seconds : 0;
  report.learning_rate =
      LrSchedule(spec_, steps_per_epoch_)
          .At(std::max<int64_t>(0, workers_[0]->optimizer_steps() - 1));
  const uint32_t every = spec_.evaluation().every_epochs();
  if (epoch % every == 0 ||
      epoch == static_cast<int>(spec_.training().epochs())) {
    absl::StatusOr<std::pair<double, double>> test = Evaluate(data_.test);
    if (!test.ok()) return test.status();
    report.test_loss = test->first;
    report.test_accuracy = test->second;
    if (spec_.evaluation().full_train_pass()) {
      // Accuracy of the trained weights on the whole training split, in
      // place of the running accuracy gathered while the weights moved.
      absl::StatusOr<std::pair<double, double>> train = Evaluate(data_.train);
      if (!train.ok()) return train.status();
      report.train_accuracy = train->second;
    }
  }
  report.stages = Reports();
  return report;
}

absl::StatusOr<std::pair<double, double>> InProcessRunner::Evaluate(
    const data::Dataset& split) {
  data::EpochBatches batches(split, EvalBatchOptions(spec_), 0);
  double loss = 0;
  int64_t correct = 0, samples = 0;
  for (int64_t i = 0; i < batches.size(); ++i) {
    data::Batch b = batches.Get(i);
    TensorPair x{b.images, {}};
    for (size_t j = 0; j + 1 < workers_.size(); ++j) {
      absl::StatusOr<TensorPair> y = workers_[j]->Evaluate(x);
      if (!y.ok()) return y.status();
      x = std::move(*y);
    }
    absl::StatusOr<LossOutput> out = workers_.back()->EvaluateLoss(x, b.labels);
    if (!out.ok()) return out.status();
    loss += out->loss * out->samples;
    correct += out->correct;
    samples += out->samples;
  }
  if (samples == 0) return std::make_pair(0.0, 0.0);
  return std::make_pair(loss / samples, static_cast<double>(correct) / samples);
}

std::vector<StageReport> InProcessRunner::Reports() const {
  std::vector<StageReport> out;
  for (size_t j = 0; j < workers_.size(); ++j) {
    out.push_back(ReportOf(*workers_[j], ranges_[j]));
  }
  return out;
}

absl::StatusOr<std::vector<EpochReport>> InProcessRunner::Run() {
  std::vector<EpochReport> reports;
  for (int e = 1; e <= static_cast<int>(spec_.training().epochs()); ++e) {
    absl::StatusOr<EpochReport> r = RunEpoch(e);
    if (!r.ok()) return r.status();
    if (options_.on_epoch) options_.on_epoch(*r);
    reports.push_back(std::move(*r));
    if (spec_.training().max_steps() > 0 &&
        workers_[0]->optimizer_steps() >=
            static_cast<int64_t>(spec_.training().max_steps())) {
      break;
    }
  }
  return reports;
}

}  // namespace petra::engine

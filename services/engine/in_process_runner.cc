#include "services/engine/in_process_runner.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/data/batches.h"
#include "services/data/dataset.h"
#include "services/engine/blocking_queue.h"
#include "services/engine/job_plan.h"
#include "services/engine/stage_io.h"
#include "services/engine/state_file.h"
#include "services/model/compute_threads.h"
#include "services/model/network.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {
namespace {

using model::TensorPair;

// How long a replica's all-reduce waits for the others: when one replica's
// pass fails, the others' stages end within it.
constexpr std::chrono::milliseconds kReplicaTimeout{120000};

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
  absl::StatusOr<std::vector<model::BlockRange>> ranges = PlanStages(resolved);
  if (!ranges.ok()) return ranges.status();
  r->ranges_ = std::move(*ranges);
  absl::StatusOr<std::vector<std::unique_ptr<StageWorker>>> workers =
      BuildStageWorkers(resolved, r->ranges_, *steps);
  if (!workers.ok()) return workers.status();
  r->workers_ = std::move(*workers);
  const int replicas =
      static_cast<int>(std::max<uint32_t>(1, resolved.replicas()));
  if (replicas > 1) {
    // The same seed: every replica starts from the same weights.
    for (int k = 1; k < replicas; ++k) {
      absl::StatusOr<std::vector<std::unique_ptr<StageWorker>>> copy =
          BuildStageWorkers(resolved, r->ranges_, *steps);
      if (!copy.ok()) return copy.status();
      r->copies_.push_back(std::move(*copy));
    }
    for (int j = 0; j < r->stage_count(); ++j) {
      absl::StatusOr<std::vector<std::unique_ptr<GradientAverager>>> group =
          MakeLocalReplicaGroup(replicas, kReplicaTimeout);
      if (!group.ok()) return group.status();
      for (int k = 0; k < replicas; ++k) {
        r->worker(k, j).set_gradient_averager((*group)[k].get());
      }
      r->groups_.push_back(std::move(*group));
    }
  }
  r->driver_ =
      std::make_unique<JobDriver>(r->spec_, r->data_, *steps, *r, r.get());
  return r;
}

InProcessRunner::~InProcessRunner() = default;

namespace {

// The queues joining the stages of one epoch. up[j] carries stage j's
// output to stage j + 1; down[j] carries into stage j from stage j + 1;
// `labels` carries the data's labels from the feed to the last stage. Each
// holds the pipeline's depth, and a flush (GPipe's last stage sends every
// backward of one before the stage below takes the first).
struct Channels {
  Channels(int stages, int64_t micro_batches, int64_t flush)
      : labels(static_cast<size_t>(micro_batches) + 1) {
    const size_t capacity =
        static_cast<size_t>(std::max<int64_t>(2 * stages, flush) + 2);
    for (int j = 0; j < stages; ++j) {
      up.push_back(std::make_unique<BlockingQueue<ForwardBatch>>(capacity));
      down.push_back(std::make_unique<BlockingQueue<BackwardBatch>>(capacity));
    }
  }
  void Close() {
    for (auto& q : up) q->Close();
    for (auto& q : down) q->Close();
    labels.Close();
  }
  std::vector<std::unique_ptr<BlockingQueue<ForwardBatch>>> up;
  std::vector<std::unique_ptr<BlockingQueue<BackwardBatch>>> down;
  BlockingQueue<torch::Tensor> labels;
};

absl::Status Closed() { return absl::CancelledError("the run is stopping"); }

class QueueInbox : public StageInbox {
 public:
  QueueInbox(int stage, int stages, Channels& c, const PassBatches& batches,
             std::mutex& feed_mu)
      : stage_(stage),
        stages_(stages),
        c_(c),
        batches_(batches),
        feed_mu_(feed_mu) {}

  absl::StatusOr<ForwardBatch> NextForward(int64_t id) override {
    ForwardBatch item;
    if (stage_ == 0) {
      // The data feed: the batch, and its labels for the last stage (and
      // for stage 0's local loss in mode forward_gradient).
      absl::StatusOr<data::Batch> got = [&] {
        std::lock_guard<std::mutex> lock(feed_mu_);
        return batches_.Get(id);
      }();
      if (!got.ok()) return got.status();
      data::Batch& b = *got;
      item = model::ForwardOf(id, {b.images, {}}, b.labels);
      if (stages_ > 1 && !c_.labels.Push(b.labels)) {
        return Closed();
      }
      return item;
    }
    std::optional<ForwardBatch> in = c_.up[stage_ - 1]->Pop();
    if (!in) return Closed();
    item = std::move(*in);
    if (stage_ == stages_ - 1) {
      std::optional<torch::Tensor> labels = c_.labels.Pop();
      if (!labels) return Closed();
      item.labels = std::move(*labels);
    }
    return item;
  }

  absl::StatusOr<BackwardBatch> NextBackward(int64_t id) override {
    std::optional<BackwardBatch> in = c_.down[stage_]->Pop();
    if (!in) return Closed();
    return std::move(*in);
  }

 private:
  const int stage_, stages_;
  Channels& c_;
  const PassBatches& batches_;
  std::mutex& feed_mu_;
};

class QueueOutbox : public StageOutbox {
 public:
  QueueOutbox(int stage, Channels& c,
              std::function<void(int64_t, const LossOutput&)> loss)
      : stage_(stage), c_(c), loss_(std::move(loss)) {}
  absl::Status SendForward(ForwardBatch item) override {
    return c_.up[stage_]->Push(std::move(item)) ? absl::OkStatus() : Closed();
  }
  absl::Status SendBackward(BackwardBatch item) override {
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

// The workers are the state: a run goes on from where they are (the seeded
// initial weights at first).
absl::StatusOr<TrainingCursor> InProcessRunner::Restore() {
  return driver_->cursor();
}

StageWorker& InProcessRunner::worker(int replica, int stage) {
  return replica == 0 ? *workers_[stage] : *copies_[replica - 1][stage];
}

// Every phase the way a fleet runs it: one thread per stage (per replica
// in training), each in the stage loop of the phase (stage_io.h), joined by
// queues.
absl::StatusOr<PassResult> InProcessRunner::RunPass(
    petra::v1::Phase phase, const PassBatches& batches) {
  const bool train = phase == petra::v1::PHASE_TRAIN;
  // Evaluation and the gradient check run on replica 0 alone.
  const int replicas = train ? this->replicas() : 1;
  const int stages = stage_count();
  const schedule::ModePlan mode = schedule::PlanMode(spec_.training());
  std::vector<PassBatches> shares;
  std::vector<std::unique_ptr<Channels>> channels;
  for (int r = 0; r < replicas; ++r) {
    shares.push_back(replicas == 1 ? batches : batches.Dealt(r, replicas));
    channels.push_back(
        std::make_unique<Channels>(stages, shares.back().size(), mode.group));
  }
  std::mutex mu;
  absl::Status failure;
  PassResult result;
  auto on_loss = [&](int r, int64_t local, const LossOutput& out) {
    // Replica r's micro-batch `local` is the pass's r + local R.
    const int64_t id = r + local * replicas;
    {
      std::lock_guard<std::mutex> lock(mu);
      result.Record(id, out.loss, out.correct, out.samples, train);
    }
    if (train && options_.on_step) {
      const auto [part, index] = batches.Locate(id);
      options_.on_step({index, out.loss, batches.parts()[part].epoch});
    }
  };
  const int threads =
      options_.threads_per_stage > 0
          ? options_.threads_per_stage
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                            (stages * replicas));
  // The feed's batches are read by every replica's first stage.
  std::mutex feed_mu;
  auto close_all = [&] {
    for (auto& c : channels) c->Close();
  };
  auto run_stage = [&](int r, int j) {
    model::SetComputeThreads(threads);
    QueueInbox inbox(j, stages, *channels[r], shares[r], feed_mu);
    QueueOutbox outbox(
        j, *channels[r],
        [&, r](int64_t id, const LossOutput& out) { on_loss(r, id, out); });
    absl::Status s = RunStagePass(worker(r, j), inbox, outbox, phase,
                                  shares[r].size(), mode);
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        // The first real error wins; the others only saw the shutdown.
        if (failure.ok() && !absl::IsCancelled(s)) {
          failure = absl::Status(
              s.code(),
              absl::StrCat(replicas > 1 ? absl::StrCat("replica ", r, " ") : "",
                           "stage ", j, ": ", s.message()));
        }
      }
      close_all();
    }
  };

  const auto start = std::chrono::steady_clock::now();
  const size_t wanted = static_cast<size_t>(this->replicas()) * stages;
  while (stage_threads_.size() < wanted) {
    stage_threads_.push_back(std::make_unique<SerialExecutor>());
  }
  // One token per stage task that has finished.
  BlockingQueue<int> done(wanted);
  for (int r = 0; r < replicas; ++r) {
    for (int j = 0; j < stages; ++j) {
      const bool posted = stage_threads_[r * stages + j]->Post([&, r, j] {
        run_stage(r, j);
        done.Push(0);
      });
      if (!posted) done.Push(0);  // Only while the runner dies.
    }
  }
  for (int i = 0; i < replicas * stages; ++i) done.Pop();
  if (!failure.ok()) return failure;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

absl::StatusOr<EpochReport> InProcessRunner::RunEpoch(int epoch) {
  TrainingCursor c = driver_->cursor();
  c.next_epoch = static_cast<uint32_t>(epoch);
  driver_->set_cursor(c);
  return driver_->RunEpoch();
}

absl::StatusOr<std::pair<double, double>> InProcessRunner::Evaluate(
    const data::Dataset& split) {
  absl::StatusOr<PassResult> r = driver_->Evaluate(split, 0);
  if (!r.ok()) return r.status();
  return std::make_pair(r->mean_loss(), r->accuracy());
}

absl::StatusOr<std::string> InProcessRunner::ExportFile() {
  std::vector<std::string> stages;
  for (int j = 0; j < stage_count(); ++j) {
    StageCheckpointMeta meta;
    meta.stage_index = j;
    absl::StatusOr<std::string> bytes = EncodeStageCheckpoint(worker(j), meta);
    if (!bytes.ok()) return bytes.status();
    stages.push_back(std::move(*bytes));
  }
  return MergeForExport(
      stages, data::PreprocessingOf(
                  spec_, data_, catalog::InputShape(spec_.model().variant())));
}

std::vector<StageReport> InProcessRunner::Reports() const {
  std::vector<StageReport> out;
  for (size_t j = 0; j < workers_.size(); ++j) {
    out.push_back(ReportOf(*workers_[j], ranges_[j]));
  }
  return out;
}

std::vector<petra::v1::StageStats> InProcessRunner::StageStats() {
  std::vector<petra::v1::StageStats> out;
  for (const StageReport& r : Reports()) out.push_back(ToProto(r));
  return out;
}

void InProcessRunner::OnEpoch(const EpochReport& report) {
  if (options_.on_epoch) options_.on_epoch(report);
}

absl::StatusOr<std::vector<EpochReport>> InProcessRunner::Run() {
  return driver_->Run();
}

}  // namespace petra::engine

#include "services/engine/in_process_runner.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/data/batches.h"
#include "services/engine/blocking_queue.h"
#include "services/engine/pipeline_schedule.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/model/partition_plan.h"

namespace petra::engine {
namespace {

using model::TensorPair;

struct UpMessage {
  int64_t id;
  TensorPair x;
};
struct DownMessage {
  int64_t id;
  TensorPair output;
  TensorPair grad;
};
struct Labels {
  int64_t id;
  torch::Tensor labels;
};

data::BatchOptions TrainBatchOptions(const petra::v1::JobSpec& s) {
  data::BatchOptions o;
  o.batch_size = s.training().micro_batch_size();
  o.shuffle = true;
  o.drop_last = true;
  o.crop_padding = s.dataset().augmentation().random_crop_padding();
  o.horizontal_flip = s.dataset().augmentation().horizontal_flip();
  o.normalize = s.dataset().augmentation().normalize();
  o.seed = s.seed();
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InProcessRunner>> InProcessRunner::Create(
    const petra::v1::JobSpec& resolved, data::Splits data,
    RunnerOptions options) {
  std::unique_ptr<InProcessRunner> r(new InProcessRunner());
  r->spec_ = resolved;
  r->data_ = std::move(data);
  r->options_ = std::move(options);
  const int64_t batch = resolved.training().micro_batch_size();
  const int64_t micro_batches = r->data_.train.size() / batch;
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training split has ", r->data_.train.size(),
                     " examples, fewer than one micro-batch of ", batch));
  }
  r->steps_per_epoch_ =
      micro_batches / resolved.training().accumulation_steps();
  if (r->steps_per_epoch_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "one epoch holds ", micro_batches, " micro-batches, fewer than k = ",
        resolved.training().accumulation_steps()));
  }

  torch::manual_seed(resolved.seed());
  absl::StatusOr<model::Network> net = model::BuildNetwork(resolved.model());
  if (!net.ok()) return net.status();
  absl::StatusOr<std::vector<model::BlockRange>> ranges =
      model::PlanPartition(*net, resolved);
  if (!ranges.ok()) return ranges.status();
  r->ranges_ = std::move(*ranges);
  const int stages = static_cast<int>(r->ranges_.size());
  const bool delayed =
      resolved.training().mode() == petra::v1::TRAINING_MODE_DELAYED;
  for (int j = 0; j < stages; ++j) {
    StageConfig config;
    config.index = j;
    config.count = stages;
    config.stash_inputs = delayed && resolved.training().stash_inputs();
    config.stash_weights = delayed && resolved.training().stash_weights();
    std::vector<std::shared_ptr<model::Block>> mine(
        net->blocks.begin() + r->ranges_[j].begin,
        net->blocks.begin() + r->ranges_[j].end);
    r->workers_.push_back(std::make_unique<StageWorker>(
        std::move(mine), config, resolved,
        LrSchedule(resolved, r->steps_per_epoch_)));
  }
  return r;
}

InProcessRunner::~InProcessRunner() = default;

absl::StatusOr<EpochReport> InProcessRunner::RunEpoch(int epoch) {
  const int stages = stage_count();
  const bool overlap =
      spec_.training().mode() != petra::v1::TRAINING_MODE_BACKPROP;
  data::EpochBatches batches(data_.train, TrainBatchOptions(spec_), epoch - 1);
  int64_t micro_batches = batches.size();
  const int64_t k = spec_.training().accumulation_steps();
  micro_batches -= micro_batches % k;  // whole optimizer steps only
  if (spec_.training().max_steps() > 0) {
    const int64_t left = static_cast<int64_t>(spec_.training().max_steps()) -
                         workers_[0]->optimizer_steps();
    micro_batches = std::min(micro_batches, std::max<int64_t>(0, left) * k);
  }

  // Queue i carries stage i's output up; down[i] carries into stage i.
  const size_t capacity = static_cast<size_t>(2 * stages + 2);
  std::vector<std::unique_ptr<BlockingQueue<UpMessage>>> up;
  std::vector<std::unique_ptr<BlockingQueue<DownMessage>>> down;
  for (int j = 0; j < stages; ++j) {
    up.push_back(std::make_unique<BlockingQueue<UpMessage>>(capacity));
    down.push_back(std::make_unique<BlockingQueue<DownMessage>>(capacity));
  }
  BlockingQueue<Labels> labels(static_cast<size_t>(micro_batches) + 1);

  std::mutex mu;
  absl::Status failure;
  double loss_sum = 0;
  int64_t correct = 0, samples = 0;
  auto fail = [&](absl::Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.ok()) failure = std::move(s);
    }
    for (auto& q : up) q->Close();
    for (auto& q : down) q->Close();
    labels.Close();
  };

  const int threads =
      options_.threads_per_stage > 0
          ? options_.threads_per_stage
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                            stages);

  auto run_stage = [&](int j) {
    at::set_num_threads(threads);
    StageWorker& w = *workers_[j];
    const bool last = j == stages - 1;
    // Forward of micro-batch m at tick t.
    auto forward = [&](int64_t m, int64_t t) -> bool {
      TensorPair x;
      if (j == 0) {
        data::Batch b = batches.Get(m);
        x = {b.images, {}};
        if (!labels.Push({m, b.labels})) return false;
      } else {
        std::optional<UpMessage> msg = up[j - 1]->Pop();
        if (!msg) return false;
        if (msg->id != m) {
          fail(absl::InternalError(absl::StrCat(
              "stage ", j, " expected micro-batch ", m, " got ", msg->id)));
          return false;
        }
        x = std::move(msg->x);
      }
      if (!last) {
        absl::StatusOr<TensorPair> y = w.Forward(m, x, t);
        if (!y.ok()) {
          fail(y.status());
          return false;
        }
        return up[j]->Push({m, std::move(*y)});
      }
      std::optional<Labels> l = labels.Pop();
      if (!l) return false;
      absl::StatusOr<LossOutput> out = w.ForwardLoss(m, x, l->labels, t);
      if (!out.ok()) {
        fail(out.status());
        return false;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        loss_sum += out->loss;
        correct += out->correct;
        samples += out->samples;
      }
      if (options_.on_step) options_.on_step({m, out->loss});
      if (j > 0) {
        return down[j - 1]->Push({m, std::move(out->backward.input),
                                  std::move(out->backward.input_grad)});
      }
      return true;
    };
    auto backward = [&](int64_t m, int64_t t) -> bool {
      std::optional<DownMessage> msg = down[j]->Pop();
      if (!msg) return false;
      absl::StatusOr<BackwardOutput> out =
          w.Backward(m, msg->output, msg->grad, t);
      if (!out.ok()) {
        fail(out.status());
        return false;
      }
      if (j > 0)
        return down[j - 1]->Push(
            {m, std::move(out->input), std::move(out->input_grad)});
      return true;
    };

    if (overlap) {
      PipelineSchedule schedule{j, stages, micro_batches};
      for (int64_t t = 0; t < schedule.ticks(); ++t) {
        if (int64_t f = schedule.ForwardAt(t); f >= 0 && !forward(f, t)) return;
        if (last) continue;
        if (int64_t b = schedule.BackwardAt(t); b >= 0 && !backward(b, t))
          return;
      }
    } else {
      // Backprop: a micro-batch goes all the way up and down before the
      // next one starts; stage 0 waits for its backward before feeding on.
      for (int64_t m = 0; m < micro_batches; ++m) {
        if (!forward(m, 2 * m)) return;
        if (!last && !backward(m, 2 * m + 1)) return;
      }
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
  }
  report.stages = Reports();
  return report;
}

absl::StatusOr<std::pair<double, double>> InProcessRunner::Evaluate(
    const data::Dataset& split) {
  data::BatchOptions o;
  o.batch_size = spec_.training().micro_batch_size();
  o.shuffle = false;
  o.drop_last = false;
  o.normalize = spec_.dataset().augmentation().normalize();
  data::EpochBatches batches(split, o, 0);
  double loss = 0;
  int64_t correct = 0, samples = 0;
  for (int64_t i = 0; i < batches.size(); ++i) {
    data::Batch b = batches.Get(i);
    TensorPair x{b.images, {}};
    for (auto& w : workers_) {
      absl::StatusOr<TensorPair> y = w->Evaluate(x);
      if (!y.ok()) return y.status();
      x = std::move(*y);
    }
    loss += torch::nn::functional::cross_entropy(
                x.a, b.labels,
                torch::nn::functional::CrossEntropyFuncOptions().reduction(
                    torch::kSum))
                .item<double>();
    correct += x.a.argmax(1).eq(b.labels).sum().item<int64_t>();
    samples += b.labels.size(0);
  }
  if (samples == 0) return std::make_pair(0.0, 0.0);
  return std::make_pair(loss / samples, static_cast<double>(correct) / samples);
}

std::vector<StageReport> InProcessRunner::Reports() const {
  std::vector<StageReport> out;
  for (size_t j = 0; j < workers_.size(); ++j) {
    const StageWorker& w = *workers_[j];
    StageReport s;
    s.index = static_cast<int>(j);
    s.blocks = ranges_[j];
    s.rebuilds_input = w.rebuilds_input();
    s.memory = w.memory();
    s.delay_ticks_mean = w.delay_ticks_mean();
    s.staleness_mean = w.staleness_mean();
    s.forward_count = w.forward_count();
    s.backward_count = w.backward_count();
    s.optimizer_steps = w.optimizer_steps();
    out.push_back(s);
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

#include "coordinator/pass_feed.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/link/open_link.h"
#include "services/wire/stage_messages.h"

namespace petra::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A pass in which no micro-batch finishes for this long has stalled.
constexpr milliseconds kStallTimeout{300000};
constexpr milliseconds kPollInterval{1000};
constexpr milliseconds kProgressInterval{2000};

double SecondsSince(steady_clock::time_point start) {
  return std::chrono::duration<double>(steady_clock::now() - start).count();
}

// Completions reported by the stages during one pass.
struct Tally {
  std::mutex mu;
  std::condition_variable cv;
  engine::PassResult result;
  int64_t exits = 0;  // micro-batches whose backward left stage 0
  steady_clock::time_point last_done = steady_clock::now();
};

// What the stages report as each micro-batch finishes, counted into `c`:
// the last stage's losses and accuracies, stage 0's backward exits.
std::function<void(const petra::v1::MicroBatchDone&)> Counter(
    Tally& c, int stages, petra::v1::Phase phase, const PassWatch& watch) {
  const bool train = phase == petra::v1::PHASE_TRAIN;
  return
      [&c, stages, phase, train, &watch](const petra::v1::MicroBatchDone& d) {
        std::lock_guard<std::mutex> lock(c.mu);
        if (d.phase() != phase) return;
        if (static_cast<int>(d.stage_index()) == stages - 1) {
          c.result.Record(static_cast<int64_t>(d.micro_batch_id()), d.loss(),
                          d.correct(), d.samples(), train);
          if (std::isfinite(d.loss()) && train && watch.finite_samples) {
            watch.finite_samples(d.samples());
          }
        } else if (d.stage_index() == 0) {
          ++c.exits;
        }
        c.last_done = steady_clock::now();
        c.cv.notify_all();
      };
}

// Hands every micro-batch of the pass to the first stage (with its
// labels where that stage is also the last, or the job sends them there),
// and its labels to the last; each Send waits for a credit.
absl::Status FeedMicroBatches(const std::string& job_id, petra::v1::Phase phase,
                              const engine::PassBatches& batches, int stages,
                              const FeedOptions& options,
                              link::ForwardLink& to_first,
                              link::ForwardLink* to_last) {
  const int64_t n = batches.size();
  for (int64_t m = 0; m < n; ++m) {
    const auto asked = steady_clock::now();
    absl::StatusOr<data::Batch> got = batches.Get(m);
    if (!got.ok()) {
      return got.status();
    }
    const double data_wait = SecondsSince(asked);
    data::Batch& b = *got;
    model::ForwardBatch p;
    p.header.job_id = job_id;
    p.header.micro_batch_id = static_cast<uint64_t>(m);
    p.header.phase = phase;
    p.header.sender_stage = -1;
    p.header.epoch = batches.EpochOf(m);
    p.x = {b.images, {}};
    if (stages == 1 || options.labels_with_data) p.labels = b.labels;
    // Send encodes (a copy), then waits for a credit.
    const auto sending = steady_clock::now();
    absl::Status sent = to_first.Send(p).status();
    if (options.metrics != nullptr) {
      options.metrics->Fed(data_wait, SecondsSince(sending), batches.Ready(m));
    }
    if (!sent.ok()) return sent;
    if (stages == 1) continue;
    p.x = {};
    p.labels = b.labels;
    if (absl::Status s = to_last->Send(p).status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Why the pass must stop now, if it must: the job interrupted, the feed
// failed (`feed_status` once it is over), a stream broken, the
// coordinator's poll of the stages failed (every kPollInterval), or no
// micro-batch finished for kStallTimeout.
absl::Status PassTrouble(const PassWatch& watch,
                         const absl::Status* feed_status, FeedStream& data,
                         FeedStream* labels, steady_clock::time_point last_done,
                         steady_clock::time_point* last_poll) {
  if (absl::Status s = watch.interrupted(); !s.ok()) return s;
  if (feed_status != nullptr && !feed_status->ok()) return *feed_status;
  if (absl::Status s = data.health(); !s.ok()) return s;
  if (labels != nullptr) {
    if (absl::Status s = labels->health(); !s.ok()) return s;
  }
  if (steady_clock::now() - *last_poll > kPollInterval) {
    *last_poll = steady_clock::now();
    if (absl::Status s = watch.poll(); !s.ok()) return s;
  }
  if (steady_clock::now() - last_done > kStallTimeout) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no micro-batch finished in ", kStallTimeout.count() / 1000,
        " s; the pipeline is stuck"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::PassResult> RunFeedPass(
    StageFleet& fleet, const std::string& job_id, petra::v1::Phase phase,
    const engine::PassBatches& batches, const PassWatch& watch,
    FeedOptions options) {
  const int stages = fleet.size();
  const bool train = phase == petra::v1::PHASE_TRAIN;
  // A pass with a backward ends when every micro-batch has left stage 0.
  const bool backward = phase != petra::v1::PHASE_EVAL;
  const int64_t n = batches.size();
  if (absl::Status s = fleet.Start(phase, batches.parts().front().epoch, n);
      !s.ok()) {
    return s;
  }
  const auto started = steady_clock::now();
  Tally c;
  auto on_done = Counter(c, stages, phase, watch);
  std::unique_ptr<FeedStream> data =
      fleet.client(0).OpenFeed(fleet.Name(0), fleet.data_key(0), on_done);
  std::unique_ptr<FeedStream> labels =
      stages > 1 ? fleet.client(stages - 1)
                       .OpenFeed(fleet.Name(stages - 1),
                                 fleet.data_key(stages - 1), on_done)
                 : nullptr;
  // What the feed hands its micro-batches to: each stream with its data
  // channel (none for gRPC). The feed's routes name no address: it opens
  // no connections of its own.
  auto route = [&options](petra::v1::Transport transport) {
    link::LinkRoute r;
    r.transport = transport;
    r.wanted = options.wanted;
    return r;
  };
  absl::StatusOr<std::unique_ptr<link::ForwardLink>> to_first =
      link::OpenForwardLink(
          route(options.to_first),
          [&data](const auto& parts) { return data->Send(parts); },
          [&data] { return data->health(); });
  absl::StatusOr<std::unique_ptr<link::ForwardLink>> to_last =
      labels == nullptr
          ? nullptr
          : link::OpenForwardLink(
                route(options.to_last),
                [&labels](const auto& parts) { return labels->Send(parts); },
                [&labels] { return labels->health(); });
  for (const auto* l : {&to_first, &to_last}) {
    if (!l->ok()) {
      data->Cancel();
      if (labels) labels->Cancel();
      return l->status();
    }
  }

  // The feed runs on its own thread so this one can watch the stages and
  // the cancel flag while the feed waits for credits.
  absl::Status feed_status;
  std::atomic<bool> feed_over{false};
  std::thread feeder([&] {
    feed_status = FeedMicroBatches(job_id, phase, batches, stages, options,
                                   **to_first, to_last->get());
    feed_over = true;
  });

  absl::Status status;
  auto last_poll = steady_clock::now();
  auto last_progress = steady_clock::now();
  while (true) {
    bool complete = false;
    steady_clock::time_point last_done;
    {
      std::unique_lock<std::mutex> lock(c.mu);
      c.cv.wait_for(lock, milliseconds(250));
      complete = c.result.micro_batches >= n &&
                 (!backward || stages == 1 || c.exits >= n);
      last_done = c.last_done;
    }
    if (complete) break;
    status = PassTrouble(watch, feed_over ? &feed_status : nullptr, *data,
                         labels.get(), last_done, &last_poll);
    if (!status.ok()) break;
    if (train && watch.progress &&
        steady_clock::now() - last_progress > kProgressInterval) {
      last_progress = steady_clock::now();
      engine::PassTotals so_far;
      {
        std::lock_guard<std::mutex> lock(c.mu);
        so_far = c.result.totals();
      }
      so_far.seconds = SecondsSince(started);
      watch.progress(so_far);
    }
  }
  if (!status.ok()) {
    for (const auto* l : {&to_first, &to_last}) {
      if (**l) (**l)->Cancel();
    }
    data->Cancel();
    if (labels) labels->Cancel();
  }
  feeder.join();
  for (FeedStream* s : {data.get(), labels.get()}) {
    if (s == nullptr) continue;
    absl::Status closed = s->Close();
    if (status.ok() && !closed.ok()) status = closed;
  }
  if (status.ok()) status = watch.poll();
  if (!status.ok()) return status;
  std::lock_guard<std::mutex> lock(c.mu);
  engine::PassResult result = std::move(c.result);
  result.seconds = SecondsSince(started);
  return result;
}

}  // namespace petra::coordinator

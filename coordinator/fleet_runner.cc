#include "coordinator/fleet_runner.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/pass_feed.h"
#include "coordinator/train_log.h"
#include "services/base/event_log.h"
#include "services/catalog/architecture_catalog.h"
#include "services/data/image_folder.h"
#include "services/engine/epoch_progress.h"
#include "services/engine/job_plan.h"
#include "services/schedule/training_mode.h"

namespace petra::coordinator {

using petra::v1::Job;
using petra::v1::JobEvent;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

FleetRunner::FleetRunner(JobRecord& record, const RunnerEnvironment& env)
    : record_(record),
      env_(env),
      connect_(ConnectorOf(env)),
      recovery_(env.recovery_timeout, env.max_recoveries) {
  const Job job = record.Snapshot();
  id_ = job.id();
  spec_ = job.spec();
}

absl::Status FleetRunner::Interrupted() const {
  if (record_.cancel_requested()) return absl::CancelledError("cancelled");
  if (record_.stop_requested()) {
    return absl::AbortedError("the coordinator is stopping");
  }
  return absl::OkStatus();
}

absl::Status FleetRunner::Prepare() {
  data::LoadOptions load;
  load.data_workers = env_.data_workers;
  load.cache_dir = env_.cache_dir;
  // A job that trained its tokenizer keeps it, through any recovery.
  load.tokenizer_model = record_.Snapshot().preprocessing().tokenizer_model();
  load.on_activity = [this](const std::string& activity) {
    record_.Update(JobEvent::KIND_STATE,
                   [&](Job& job) { job.set_activity(activity); });
  };
  absl::StatusOr<data::Splits> data =
      data::LoadForJob(spec_, env_.data_root,
                       catalog::InputShape(spec_.model().variant()), load);
  if (!data.ok()) {
    record_.Update(JobEvent::KIND_STATE,
                   [](Job& job) { job.clear_activity(); });
    return Prefixed("loading the data: ", data.status());
  }
  data_ = std::move(*data);
  // Recorded with the job, and carried by every export.
  preprocessing_ = data::PreprocessingOf(
      spec_, data_, catalog::InputShape(spec_.model().variant()));
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    *job.mutable_preprocessing() = preprocessing_;
    job.clear_activity();
  });
  absl::StatusOr<int64_t> steps =
      engine::StepsPerEpoch(spec_, data_.train.size());
  if (!steps.ok()) return steps.status();
  steps_per_epoch_ = *steps;
  progress_.emplace(spec_, steps_per_epoch_, data_.test.bytes_per_token());
  absl::StatusOr<JobBlocks> blocks = DescribeJobBlocks(spec_);
  if (!blocks.ok())
    return Prefixed("planning the partition: ", blocks.status());
  blocks_ = std::move(*blocks);
  ranges_ = blocks_.ranges;
  // A job that placed its stages before (this coordinator restarted) keeps
  // their cut: its checkpoints are of those ranges.
  const Job before = record_.Snapshot();
  std::vector<model::BlockRange> recorded;
  for (const petra::v1::StagePlacement& p : before.stages()) {
    if (p.replica() != 0) continue;  // every replica has replica 0's cut
    recorded.push_back(
        {static_cast<int>(p.layer_begin()), static_cast<int>(p.layer_end())});
  }
  if (recorded.size() == ranges_.size()) {
    if (model::CoversInOrder(recorded,
                             static_cast<int>(blocks_.costs.size()))) {
      ranges_ = std::move(recorded);
      ranges_fixed_ = true;
    }
  }
  replicas_ = static_cast<int>(std::max<uint32_t>(1, spec_.replicas()));
  const int servers = stages() * replicas_;
  const int fleet = static_cast<int>(env_.fleet->Addresses().size());
  // A job resuming after a restart of this coordinator finds a fleet of
  // registered servers empty until they register again (in seconds): it
  // waits for them in Attach, up to --recovery-timeout, trying the servers
  // it ran on first.
  if (servers > fleet && !recovering_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job needs ", servers, " stage servers",
        replicas_ > 1 ? absl::StrCat(" (", replicas_, " replicas x ", stages(),
                                     " stages)")
                      : "",
        " but the fleet has ", fleet,
        " (--stages and registered servers): ", servers - fleet, " short"));
  }
  if (replicas_ > 1 && env_.replica_store == nullptr) {
    return absl::FailedPreconditionError(
        "replicas: this coordinator hosts no replica store");
  }
  return absl::OkStatus();
}

absl::Status FleetRunner::PollStages(int r, bool* busy) {
  const int stages = this->stages();
  if (busy != nullptr) *busy = false;
  for (int k = r < 0 ? 0 : r; k < (r < 0 ? replicas_ : r + 1); ++k) {
    bool mine = false;
    absl::StatusOr<std::vector<petra::v1::StageStats>> stats =
        pipelines_[k].fleet->Poll(&mine);
    if (busy != nullptr && mine) *busy = true;
    if (!stats.ok()) {
      return replicas_ > 1
                 ? Prefixed(absl::StrCat("replica ", k, ": "), stats.status())
                 : stats.status();
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stage_stats_.resize(static_cast<size_t>(stages * replicas_));
    for (int j = 0; j < stages && j < static_cast<int>(stats->size()); ++j) {
      (*stats)[j].set_replica(k);
      stage_stats_[k * stages + j] = std::move((*stats)[j]);
    }
  }
  return absl::OkStatus();
}

absl::Status FleetRunner::AwaitSettled() {
  // As long as a replica may wait for another at its all-reduce.
  const auto deadline = steady_clock::now() + std::chrono::seconds(90);
  while (true) {
    bool busy = false;
    if (absl::Status s = PollStages(-1, &busy); !s.ok()) return s;
    if (!busy) return absl::OkStatus();
    if (absl::Status s = Interrupted(); !s.ok()) return s;
    if (steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          "the replicas' stages did not finish their pass within 90 s of its "
          "last micro-batch (settling the replicas)");
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

void FleetRunner::ReleaseAll() {
  std::vector<std::thread> releasing;
  for (Pipeline& p : pipelines_) {
    releasing.emplace_back([&p] { p.fleet->ReleaseAll(); });
  }
  for (std::thread& t : releasing) t.join();
}

absl::StatusOr<engine::PassResult> FleetRunner::RunPass(
    petra::v1::Phase phase, const engine::PassBatches& batches) {
  const bool train = phase == petra::v1::PHASE_TRAIN;
  // Evaluation and the gradient check run on replica 0 alone.
  const int replicas = train ? replicas_ : 1;
  PassWatch watch;
  watch.interrupted = [this] { return Interrupted(); };
  watch.poll = [this] { return PollStages(0); };
  watch.progress = [this, &batches](const engine::PassTotals& so_far) {
    petra::v1::Progress p;
    // The epoch the last stage is in (a pass may span several).
    p.set_epoch(batches.EpochOf(
        std::clamp<int64_t>(so_far.micro_batches - 1, 0, batches.size() - 1)));
    p.set_step(steps_done_ +
               so_far.micro_batches / engine::MicroBatchesPerStep(spec_));
    if (so_far.samples > 0) {
      p.set_train_loss(so_far.mean_loss());
      p.set_train_accuracy(so_far.accuracy());
      p.set_samples_per_second(so_far.samples_per_second());
    }
    Publish(JobEvent::KIND_PROGRESS, std::move(p));
  };
  if (env_.metrics != nullptr) {
    // A language model's losses count tokens; the samples are sequences.
    const int64_t seq_len =
        catalog::IsLanguageModel(spec_.model().architecture())
            ? spec_.model().transformer().seq_len()
            : 0;
    watch.finite_samples = [this, seq_len](int64_t n) {
      if (seq_len > 0) {
        env_.metrics->TrainSamples(n / seq_len, n);
      } else {
        env_.metrics->TrainSamples(n);
      }
    };
  }
  FeedOptions feed;
  feed.labels_with_data =
      train &&
      schedule::PlanMode(spec_.training()).traffic.labels_with_activations;
  feed.metrics = env_.metrics;
  feed.wanted = spec_.transport();
  if (replicas > 1) return RunReplicatedPass(phase, batches, watch, feed);
  feed.to_first = pipelines_[0].feed_to_first;
  feed.to_last = pipelines_[0].feed_to_last;
  return RunFeedPass(*pipelines_[0].fleet, id_, phase, batches, watch, feed);
}

absl::StatusOr<engine::PassResult> FleetRunner::RunReplicatedPass(
    petra::v1::Phase phase, const engine::PassBatches& batches,
    const PassWatch& watch, const FeedOptions& feed) {
  const int replicas = replicas_;
  std::mutex mu;
  // The first replica whose pass failed, and why; the others then stop.
  int failed = -1;
  absl::Status failure;
  std::vector<engine::PassTotals> so_far(replicas);
  std::vector<engine::PassResult> results(replicas);
  std::vector<engine::PassBatches> shares;
  for (int r = 0; r < replicas; ++r) {
    shares.push_back(batches.Dealt(r, replicas));
  }
  auto run = [&](int r) {
    PassWatch mine = watch;
    mine.interrupted = [&, r]() -> absl::Status {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (failed >= 0 && failed != r) {
          return absl::AbortedError(
              absl::StrCat("replica ", failed, " stopped"));
        }
      }
      return watch.interrupted();
    };
    mine.poll = [this, r] { return PollStages(r); };
    // Progress counts every replica's micro-batches: each reports its
    // own, replica 0 publishes the sum.
    mine.progress = [&, r](const engine::PassTotals& t) {
      engine::PassTotals sum;
      {
        std::lock_guard<std::mutex> lock(mu);
        so_far[r] = t;
        if (r != 0) return;
        for (const engine::PassTotals& x : so_far) {
          sum.micro_batches += x.micro_batches;
          sum.fed_samples += x.fed_samples;
          sum.samples += x.samples;
          sum.correct += x.correct;
          sum.loss_sum += x.loss_sum;
          sum.skipped += x.skipped;
          sum.seconds = std::max(sum.seconds, x.seconds);
        }
      }
      if (watch.progress) watch.progress(sum);
    };
    FeedOptions options = feed;
    options.to_first = pipelines_[r].feed_to_first;
    options.to_last = pipelines_[r].feed_to_last;
    absl::StatusOr<engine::PassResult> result =
        RunFeedPass(*pipelines_[r].fleet, id_, phase, shares[r], mine, options);
    std::lock_guard<std::mutex> lock(mu);
    if (result.ok()) {
      results[r] = std::move(*result);
    } else if (failed < 0) {
      failed = r;
      failure = Prefixed(absl::StrCat("replica ", r, ": "), result.status());
    }
  };
  std::vector<std::thread> feeds;
  for (int r = 1; r < replicas; ++r) feeds.emplace_back(run, r);
  run(0);
  for (std::thread& t : feeds) t.join();
  if (failed >= 0) {
    // A cancel or a stopping coordinator keeps its own code (the job
    // driver and the recovery read it).
    absl::Status interrupted = watch.interrupted();
    return interrupted.ok() ? failure : interrupted;
  }
  if (absl::Status s = AwaitSettled(); !s.ok()) return s;
  engine::PassResult merged;
  for (int r = 0; r < replicas; ++r) merged.Absorb(results[r], r, replicas);
  return merged;
}

absl::Status FleetRunner::OnTrainPass(uint32_t epoch, uint64_t steps_before,
                                      const engine::PassResult& train) {
  return TrainLog(layout().train_log())
      .Append(epoch, steps_before, engine::MicroBatchesPerStep(spec_),
              train.losses());
}

void FleetRunner::OnEpoch(const engine::EpochReport& report) {
  PETRA_LOG_EVENT(
      kInfo, report.mid_epoch ? "evaluation" : "epoch_end", {"job_id", id_},
      {"epoch", absl::StrCat(report.epoch)},
      {"steps", absl::StrCat(report.steps)},
      {"train_loss", absl::StrFormat("%.4f", report.train_loss)},
      {"test_accuracy",
       report.evaluated ? absl::StrFormat("%.4f", report.test_accuracy) : "-"},
      {"samples_per_second",
       absl::StrFormat("%.1f", report.samples_per_second)});
  steps_done_ = report.steps;
  if (report.evaluated) {
    last_test_ = std::make_pair(report.test_loss, report.test_accuracy);
  }
  if (report.mid_epoch) {
    Publish(JobEvent::KIND_EVALUATION,
            progress_->AfterEpoch(report, ElapsedSeconds()));
    return;
  }
  Publish(JobEvent::KIND_EPOCH_END,
          progress_->AfterEpoch(report, ElapsedSeconds()));
  recovery_.EpochFinished();
}

double FleetRunner::ElapsedSeconds() const {
  return std::chrono::duration<double>(steady_clock::now() - started_).count();
}

void FleetRunner::Publish(JobEvent::Kind kind, petra::v1::Progress p) {
  // A pass's running figures come without what an epoch's end carries.
  // (Before the data is loaded, the epoch's steps are not known: 0.)
  if (!p.has_test_accuracy() && last_test_) {
    p.set_test_loss(last_test_->first);
    p.set_test_accuracy(last_test_->second);
  }
  if (progress_) {
    progress_->Complete(ElapsedSeconds(), &p);
  } else {
    engine::ProgressBuilder(spec_, 0).Complete(ElapsedSeconds(), &p);
  }
  if (p.stages_size() == 0) {
    // The replicas' feeds poll while this publishes: under the lock.
    for (const auto& s : StageStats()) *p.add_stages() = s;
  }
  // Epoch ends and evaluations inside epochs are kept in the record.
  const bool point =
      kind == JobEvent::KIND_EPOCH_END || kind == JobEvent::KIND_EVALUATION;
  if (!point) {
    uint64_t corrupt = 0;
    for (const data::Dataset* split : {&data_.train, &data_.test}) {
      if (split->source != nullptr) {
        corrupt += static_cast<uint64_t>(split->source->corrupt_skipped());
      }
    }
    p.set_corrupt_images_skipped(corrupt);
  }
  if (env_.metrics != nullptr) env_.metrics->Progress(id_, p);
  record_.Update(kind, [&](Job& job) {
    *job.mutable_progress() = p;
    if (!point) return;
    // Training again after a recovery: the points of the first run at or
    // past this one make way (the same step, or a later epoch).
    auto* epochs = job.mutable_epochs();
    while (!epochs->empty() && (epochs->rbegin()->epoch() > p.epoch() ||
                                epochs->rbegin()->step() >= p.step())) {
      epochs->RemoveLast();
    }
    petra::v1::Progress* kept = epochs->Add();
    *kept = p;
    kept->clear_stages();
  });
}

absl::Status FleetRunner::Run() {
  started_ = steady_clock::now();
  // A job found RECOVERING was running when its coordinator stopped.
  recovering_ = record_.Snapshot().state() == petra::v1::JOB_STATE_RECOVERING;
  if (absl::Status s = Prepare(); !s.ok()) return s;
  while (true) {
    if (absl::Status s = Interrupted(); !s.ok()) return s;
    // Too few servers, even after the recovery wait, ends the job.
    if (absl::Status s = Attach(recovery_.wait(recovering_)); !s.ok()) {
      return s;
    }
    engine::JobDriver driver(spec_, data_, steps_per_epoch_, *this, this);
    absl::Status status = driver.Run().status();
    if (status.ok() || !Interrupted().ok()) return status;
    // A job that never ran fails at once (its fleet is likely misnamed); a
    // running one waits for its lost stage and resumes.
    const bool ran = recovering_ || record_.Snapshot().has_start_time();
    if (absl::Status end = recovery_.Decide(status, ran,
                                            [&] {
                                              for (Pipeline& p : pipelines_) {
                                                if (p.fleet->LostAStage(status))
                                                  return true;
                                              }
                                              return false;
                                            });
        !end.ok()) {
      return end;
    }
    recovery_.Begin(record_, env_.metrics, id_, status);
    ReleaseAll();
    recovering_ = true;
  }
}

}  // namespace petra::coordinator

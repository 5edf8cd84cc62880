#include "coordinator/fleet_runner.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/pass_feed.h"
#include "coordinator/train_log.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"
#include "services/data/image_folder.h"
#include "services/engine/epoch_progress.h"
#include "services/engine/job_plan.h"
#include "services/engine/training_mode.h"
#include "services/job/job_spec_validation.h"
#include "services/model/architecture_catalog.h"

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
  load.cache_dir = (std::filesystem::path(env_.state_dir) / "cache").string();
  // A job that trained its tokenizer keeps it, through any recovery.
  load.tokenizer_model = record_.Snapshot().preprocessing().tokenizer_model();
  load.on_activity = [this](const std::string& activity) {
    record_.Update(JobEvent::KIND_STATE,
                   [&](Job& job) { job.set_activity(activity); });
  };
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      spec_, env_.data_root, model::InputShape(spec_.model().variant()), load);
  if (!data.ok()) {
    record_.Update(JobEvent::KIND_STATE,
                   [](Job& job) { job.clear_activity(); });
    return Prefixed("loading the data: ", data.status());
  }
  data_ = std::move(*data);
  // Recorded with the job, and carried by every export.
  preprocessing_ = data::PreprocessingOf(
      spec_, data_, model::InputShape(spec_.model().variant()));
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
  if (servers > fleet) {
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

absl::Status FleetRunner::Attach(std::chrono::seconds wait) {
  const int stages = this->stages() * replicas_;
  // The job's own servers first (after a loss), then the fleet's others in
  // order; none that another running job holds. Asked again each round:
  // servers join, leave, and come free as other jobs end.
  auto candidates_now = [&] {
    std::vector<std::string> candidates;
    const std::set<std::string> others = env_.claims != nullptr
                                             ? env_.claims->HeldByOthers(id_)
                                             : std::set<std::string>();
    auto add = [&](const std::string& a) {
      if (others.count(a) == 0 &&
          std::find(candidates.begin(), candidates.end(), a) ==
              candidates.end()) {
        candidates.push_back(a);
      }
    };
    // A named copy: ranging over Snapshot().stages() would read the
    // temporary Job after it is destroyed (ASan: stack-use-after-scope).
    const Job snapshot = record_.Snapshot();
    for (const petra::v1::StagePlacement& p : snapshot.stages()) {
      add(p.address());
    }
    for (const std::string& a : env_.fleet->Addresses()) add(a);
    return candidates;
  };
  const auto deadline = steady_clock::now() + wait;
  // A server another job claimed between this job's probe and its claim
  // is a race, not a shortage: the job looks again for a while whatever
  // its wait.
  const auto claim_deadline =
      steady_clock::now() +
      std::max<std::chrono::seconds>(wait, std::chrono::seconds(30));
  if (wait.count() > 0) {
    PETRA_LOG_EVENT(kInfo, "waiting_for_stages", {"job_id", id_},
                    {"stages", absl::StrCat(stages)},
                    {"seconds", absl::StrCat(wait.count())});
  }
  std::vector<std::string> asked = candidates_now();
  auto probe = std::make_unique<ServerProbe>(asked, connect_);
  std::string claim_refused;
  bool said_waiting = false;
  while (true) {
    if (absl::Status s = Interrupted(); !s.ok()) return s;
    if (std::vector<std::string> now = candidates_now(); now != asked) {
      asked = std::move(now);
      probe = std::make_unique<ServerProbe>(asked, connect_);
    }
    ProbeResult r = probe->Round();
    absl::Status claimed = absl::OkStatus();
    if (static_cast<int>(r.chosen.size()) >= stages) {
      // Nothing fits these servers: refused before any stage starts.
      if (absl::Status s = Place(r); !s.ok()) return s;
      // Another job may have taken one since the candidates were read.
      if (env_.claims != nullptr) claimed = env_.claims->Claim(id_, r.chosen);
    }
    if (static_cast<int>(r.chosen.size()) >= stages && claimed.ok()) {
      // Replica k's stages are the chosen k J .. k J + J - 1.
      const int j_count = this->stages();
      pipelines_.clear();
      absl::Status s;
      for (int k = 0; k < replicas_; ++k) {
        auto slice = [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          return V(v.begin() + k * j_count, v.begin() + (k + 1) * j_count);
        };
        Pipeline p;
        p.fleet = std::make_unique<StageFleet>(id_, slice(r.chosen), connect_,
                                               slice(r.endpoints));
        if (s.ok()) s = p.fleet->ReleaseStale(slice(r.held));
        pipelines_.push_back(std::move(p));
      }
      if (s.ok()) s = Assign();
      if (s.ok() && env_.metrics != nullptr) {
        env_.metrics->JobServers(id_, stages);
      }
      // A recovery outlives a server that stops between the probe and the
      // Assign (it drains, or dies): probe again until the wait is over.
      if (s.ok() || !absl::IsUnavailable(s) || steady_clock::now() >= deadline)
        return s;
      PETRA_LOG_EVENT(kWarning, "attach_retry", {"job_id", id_},
                      {"detail", std::string(s.message())});
      ReleaseAll();
      pipelines_.clear();
      std::this_thread::sleep_for(milliseconds(500));
      continue;
    }
    if (!claimed.ok()) claim_refused = std::string(claimed.message());
    // A first start that finds too few free servers while other jobs hold
    // some waits for them (the scheduler counted as free a listed server
    // that does not answer); with no other job running it fails at once,
    // as it would alone.
    const bool others_hold = !recovering_ && env_.claims != nullptr &&
                             !env_.claims->HeldByOthers(id_).empty();
    if (others_hold && !said_waiting) {
      said_waiting = true;
      PETRA_LOG_EVENT(kInfo, "waiting_for_other_jobs", {"job_id", id_},
                      {"stages", absl::StrCat(stages)},
                      {"free", absl::StrCat(r.chosen.size())});
    }
    if (!others_hold &&
        steady_clock::now() >= (claimed.ok() ? deadline : claim_deadline)) {
      return absl::UnavailableError(absl::StrCat(
          "the job needs ", stages,
          stages == 1 ? " stage server and " : " stage servers and only ",
          r.chosen.size(), " answered and were free",
          wait.count() > 0 ? absl::StrCat(" within ", wait.count(),
                                          " s (--recovery-timeout)")
                           : "",
          ": ", absl::StrJoin(r.missing, "; "),
          claim_refused.empty() ? "" : absl::StrCat("; ", claim_refused)));
    }
    std::this_thread::sleep_for(milliseconds(500));
  }
}

absl::Status FleetRunner::Place(ProbeResult& probe) {
  std::vector<sim::PlacementServer> servers;
  for (size_t i = 0; i < probe.chosen.size(); ++i) {
    const std::string& host = probe.endpoints[i].host_id();
    servers.push_back({probe.chosen[i], host.empty() ? probe.chosen[i] : host,
                       probe.memory_bytes[i], probe.memory_sources[i]});
  }
  // Every replica's stages at once (replica r's stage j is server r J + j
  // of the placement), weighing each stage's all-reduce with its copies.
  absl::StatusOr<sim::Placement> placement =
      PlaceStages(blocks_, ranges_, ranges_fixed_, std::move(servers),
                  env_.host_link_bandwidth, env_.cross_host_bandwidth,
                  replicas_, spec_.training().accumulation_steps());
  if (!placement.ok()) return placement.status();
  const bool moved = placement->ranges != ranges_;
  ranges_ = placement->ranges;
  ranges_fixed_ = true;
  const int cross_host_links = placement->cross_host_links;
  probe.Keep(placement->servers);
  std::vector<std::string> cut;
  for (const model::BlockRange& r : ranges_)
    cut.push_back(absl::StrCat(r.begin, "-", r.end - 1));
  PETRA_LOG_EVENT(
      kInfo, "placement", {"job_id", id_},
      {"servers", absl::StrJoin(probe.chosen, ",")},
      {"replicas", absl::StrCat(replicas_)},
      {"blocks", absl::StrJoin(cut, ",")},
      {"cross_host_links", absl::StrCat(cross_host_links)},
      {"cross_host_rings", absl::StrCat(placement->cross_host_rings)},
      {"cut", moved ? "moved to fit memory" : "as planned"});
  return absl::OkStatus();
}

absl::StatusOr<petra::v1::AssignRequest> FleetRunner::AssignRequestOf(int r,
                                                                      int j) {
  const Pipeline& p = pipelines_[r];
  const int stages = this->stages();
  petra::v1::AssignRequest request;
  request.set_job_id(id_);
  *request.mutable_spec() = spec_;
  request.set_stage_index(j);
  request.set_stage_count(stages);
  request.mutable_layers()->set_begin(ranges_[j].begin);
  request.mutable_layers()->set_end(ranges_[j].end);
  for (const model::BlockRange& range : ranges_) {
    petra::v1::LayerRange* l = request.add_partition();
    l->set_begin(range.begin);
    l->set_end(range.end);
  }
  if (j > 0) {
    request.set_previous_address(p.fleet->address(j - 1));
    request.set_previous_transport(p.links[j - 1]);
  }
  if (j + 1 < stages) {
    request.set_next_address(p.fleet->address(j + 1));
    request.set_next_transport(p.links[j]);
  }
  request.set_device(job::RequestedDevice(spec_, j));
  request.set_steps_per_epoch(static_cast<uint64_t>(steps_per_epoch_));
  if (replicas_ > 1) {
    absl::StatusOr<std::string> store = env_.replica_store->Address();
    if (!store.ok()) return Prefixed("the replica store: ", store.status());
    petra::v1::ReplicaAssignment* a = request.mutable_replica();
    a->set_index(r);
    a->set_count(replicas_);
    a->set_store_address(*store);
    // Each Assign's groups are new: a recovered job never meets the keys
    // its lost servers left in the store.
    a->set_group(absl::StrCat(id_, "/", assigns_, "/stage-", j));
    a->set_local_host(base::HostOf(p.fleet->address(j)));
  }
  return request;
}

absl::Status FleetRunner::Assign() {
  const int stages = this->stages();
  const int servers = stages * replicas_;
  if (absl::Status s = ChooseTransports(); !s.ok()) {
    // Not the fleet's fault: no recovery changes where the servers run.
    return absl::FailedPreconditionError(s.message());
  }
  ++assigns_;
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    job.clear_stages();
    for (int r = 0; r < replicas_; ++r) {
      const Pipeline& pipe = pipelines_[r];
      for (int j = 0; j < stages; ++j) {
        petra::v1::StagePlacement* p = job.add_stages();
        p->set_stage_index(j);
        p->set_replica(r);
        p->set_address(pipe.fleet->address(j));
        p->set_layer_begin(ranges_[j].begin);
        p->set_layer_end(ranges_[j].end);
        p->set_device(job::RequestedDevice(spec_, j));
        if (j + 1 < stages) p->set_transport_to_next(pipe.links[j]);
        if (j == 0) p->set_transport_from_feed(pipe.feed_to_first);
        if (j == stages - 1 && j > 0) {
          p->set_transport_from_feed(pipe.feed_to_last);
        }
      }
    }
  });
  std::vector<petra::v1::AssignRequest> requests(servers);
  for (int k = 0; k < servers; ++k) {
    absl::StatusOr<petra::v1::AssignRequest> request =
        AssignRequestOf(k / stages, k % stages);
    if (!request.ok()) return request.status();
    requests[k] = std::move(*request);
  }
  // Every stage builds its blocks at once; a stage opens its links only
  // when a pass starts, so the order does not matter. With replicas, each
  // stage's Assign also waits for its copies to join their group: all are
  // sent at once.
  std::vector<petra::v1::AssignResponse> responses(servers);
  absl::Status assigned = StageFleet::ForEach(servers, [&](int k) {
    absl::StatusOr<petra::v1::AssignResponse> response =
        pipelines_[k / stages].fleet->Assign(k % stages, requests[k]);
    if (!response.ok()) {
      return replicas_ > 1
                 ? Prefixed(absl::StrCat("replica ", k / stages, ": "),
                            response.status())
                 : response.status();
    }
    responses[k] = std::move(*response);
    return absl::OkStatus();
  });
  if (!assigned.ok()) return assigned;
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    for (int k = 0; k < servers; ++k) {
      job.mutable_stages(k)->set_parameter_count(
          responses[k].parameter_count());
      job.mutable_stages(k)->set_device(responses[k].device());
    }
  });
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
    const int64_t seq_len = model::IsLanguageModel(spec_.model().architecture())
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
      engine::PlanMode(spec_.training()).traffic.labels_with_activations;
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
      kInfo, "epoch_end", {"job_id", id_},
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
  if (kind != JobEvent::KIND_EPOCH_END) {
    uint64_t corrupt = 0;
    for (const data::Dataset* split : {&data_.train, &data_.test}) {
      if (split->source != nullptr) {
        corrupt += static_cast<uint64_t>(split->source->corrupt_skipped());
      }
    }
    p.set_corrupt_images_skipped(corrupt);
  }
  if (env_.metrics != nullptr) env_.metrics->Progress(id_, p);
  record_.Update(kind, [&](Job& job) { *job.mutable_progress() = p; });
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

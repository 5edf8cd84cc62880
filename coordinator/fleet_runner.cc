#include "coordinator/fleet_runner.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/grpc_stage_client.h"
#include "coordinator/pass_feed.h"
#include "coordinator/train_log.h"
#include "services/base/event_log.h"
#include "services/data/image_folder.h"
#include "services/engine/epoch_progress.h"
#include "services/engine/job_plan.h"
#include "services/engine/training_mode.h"
#include "services/job/job_spec_validation.h"
#include "services/link/endpoint.h"
#include "services/link/transport_choice.h"
#include "services/model/architecture_catalog.h"

namespace petra::coordinator {

using petra::v1::Job;
using petra::v1::JobEvent;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

FleetRunner::FleetRunner(JobRecord& record, const RunnerEnvironment& env)
    : record_(record),
      env_(env),
      connect_(env.connect ? env.connect : GrpcStageConnector(env.security)),
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
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      spec_, env_.data_root, model::InputShape(spec_.model().variant()), load);
  if (!data.ok()) return Prefixed("loading the data: ", data.status());
  data_ = std::move(*data);
  // Recorded with the job, and carried by every export.
  preprocessing_ = data::PreprocessingOf(
      spec_, data_, model::InputShape(spec_.model().variant()));
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    *job.mutable_preprocessing() = preprocessing_;
  });
  absl::StatusOr<int64_t> steps =
      engine::StepsPerEpoch(spec_, data_.train.size());
  if (!steps.ok()) return steps.status();
  steps_per_epoch_ = *steps;
  progress_.emplace(spec_, steps_per_epoch_);
  absl::StatusOr<JobBlocks> blocks = DescribeJobBlocks(spec_);
  if (!blocks.ok())
    return Prefixed("planning the partition: ", blocks.status());
  blocks_ = std::move(*blocks);
  ranges_ = blocks_.ranges;
  // A job that placed its stages before (this coordinator restarted) keeps
  // their cut: its checkpoints are of those ranges.
  const Job before = record_.Snapshot();
  if (before.stages_size() == static_cast<int>(ranges_.size())) {
    std::vector<model::BlockRange> recorded;
    for (const petra::v1::StagePlacement& p : before.stages()) {
      recorded.push_back(
          {static_cast<int>(p.layer_begin()), static_cast<int>(p.layer_end())});
    }
    if (model::CoversInOrder(recorded,
                             static_cast<int>(blocks_.costs.size()))) {
      ranges_ = std::move(recorded);
      ranges_fixed_ = true;
    }
  }
  const int stages = static_cast<int>(ranges_.size());
  if (stages > static_cast<int>(env_.stage_addresses.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job needs ", stages, " stage servers but the fleet has ",
        env_.stage_addresses.size()));
  }
  return absl::OkStatus();
}

absl::Status FleetRunner::Attach(std::chrono::seconds wait) {
  const int stages = static_cast<int>(ranges_.size());
  std::vector<std::string> candidates;
  // A named copy: ranging over Snapshot().stages() would read the
  // temporary Job after it is destroyed (ASan: stack-use-after-scope).
  const Job snapshot = record_.Snapshot();
  for (const petra::v1::StagePlacement& p : snapshot.stages()) {
    candidates.push_back(p.address());
  }
  for (const std::string& a : env_.stage_addresses) {
    if (std::find(candidates.begin(), candidates.end(), a) ==
        candidates.end()) {
      candidates.push_back(a);
    }
  }
  const auto deadline = steady_clock::now() + wait;
  if (wait.count() > 0) {
    PETRA_LOG_EVENT(kInfo, "waiting_for_stages", {"job_id", id_},
                    {"stages", absl::StrCat(stages)},
                    {"seconds", absl::StrCat(wait.count())});
  }
  ServerProbe probe(std::move(candidates), connect_);
  while (true) {
    if (absl::Status s = Interrupted(); !s.ok()) return s;
    ProbeResult r = probe.Round();
    if (static_cast<int>(r.chosen.size()) >= stages) {
      // Nothing fits these servers: refused before any stage starts.
      if (absl::Status s = Place(r); !s.ok()) return s;
      fleet_ = std::make_unique<StageFleet>(id_, std::move(r.chosen), connect_,
                                            std::move(r.endpoints));
      absl::Status s = fleet_->ReleaseStale(r.held);
      if (s.ok()) s = Assign();
      // A recovery outlives a server that stops between the probe and the
      // Assign (it drains, or dies): probe again until the wait is over.
      if (s.ok() || !absl::IsUnavailable(s) || steady_clock::now() >= deadline)
        return s;
      PETRA_LOG_EVENT(kWarning, "attach_retry", {"job_id", id_},
                      {"detail", std::string(s.message())});
      ReleaseAll();
      fleet_.reset();
      std::this_thread::sleep_for(milliseconds(500));
      continue;
    }
    if (steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the job needs ", stages,
          stages == 1 ? " stage server and " : " stage servers and only ",
          r.chosen.size(), " answered and were free",
          wait.count() > 0 ? absl::StrCat(" within ", wait.count(),
                                          " s (--recovery-timeout)")
                           : "",
          ": ", absl::StrJoin(r.missing, "; ")));
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
  absl::StatusOr<sim::Placement> placement =
      PlaceStages(blocks_, ranges_, ranges_fixed_, std::move(servers),
                  env_.host_link_bandwidth, env_.cross_host_bandwidth);
  if (!placement.ok()) return placement.status();
  const bool moved = placement->ranges != ranges_;
  ranges_ = placement->ranges;
  ranges_fixed_ = true;
  probe.Keep(placement->servers);
  std::vector<std::string> cut;
  for (const model::BlockRange& r : ranges_)
    cut.push_back(absl::StrCat(r.begin, "-", r.end - 1));
  PETRA_LOG_EVENT(
      kInfo, "placement", {"job_id", id_},
      {"servers", absl::StrJoin(probe.chosen, ",")},
      {"blocks", absl::StrJoin(cut, ",")},
      {"cross_host_links", absl::StrCat(placement->cross_host_links)},
      {"cut", moved ? "moved to fit memory" : "as planned"});
  return absl::OkStatus();
}

absl::Status FleetRunner::ChooseTransports() {
  const int stages = fleet_->size();
  const petra::v1::Transport wanted = spec_.transport();
  links_.assign(stages, petra::v1::TRANSPORT_GRPC);
  for (int j = 0; j + 1 < stages; ++j) {
    absl::StatusOr<petra::v1::Transport> t = link::ChooseTransport(
        wanted, fleet_->endpoint(j), fleet_->endpoint(j + 1),
        absl::StrCat(fleet_->Name(j), " <-> ", fleet_->Name(j + 1)));
    if (!t.ok()) return t.status();
    links_[j] = *t;
  }
  const petra::v1::LinkEndpoint& here = link::LocalEndpoint();
  for (auto [j, to] :
       {std::pair{0, &feed_to_first_}, std::pair{stages - 1, &feed_to_last_}}) {
    absl::StatusOr<petra::v1::Transport> t = link::ChooseFeedTransport(
        wanted, here, fleet_->endpoint(j),
        absl::StrCat("the coordinator -> ", fleet_->Name(j)));
    if (!t.ok()) return t.status();
    *to = *t;
  }
  return absl::OkStatus();
}

absl::Status FleetRunner::Assign() {
  const int stages = fleet_->size();
  if (absl::Status s = ChooseTransports(); !s.ok()) {
    // Not the fleet's fault: no recovery changes where the servers run.
    return absl::FailedPreconditionError(s.message());
  }
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    job.clear_stages();
    for (int j = 0; j < stages; ++j) {
      petra::v1::StagePlacement* p = job.add_stages();
      p->set_stage_index(j);
      p->set_address(fleet_->address(j));
      p->set_layer_begin(ranges_[j].begin);
      p->set_layer_end(ranges_[j].end);
      p->set_device(job::RequestedDevice(spec_, j));
      if (j + 1 < stages) p->set_transport_to_next(links_[j]);
      if (j == 0) p->set_transport_from_feed(feed_to_first_);
      if (j == stages - 1 && j > 0) p->set_transport_from_feed(feed_to_last_);
    }
  });
  std::vector<petra::v1::AssignRequest> requests(stages);
  for (int j = 0; j < stages; ++j) {
    petra::v1::AssignRequest& request = requests[j];
    request.set_job_id(id_);
    *request.mutable_spec() = spec_;
    request.set_stage_index(j);
    request.set_stage_count(stages);
    request.mutable_layers()->set_begin(ranges_[j].begin);
    request.mutable_layers()->set_end(ranges_[j].end);
    for (const model::BlockRange& r : ranges_) {
      petra::v1::LayerRange* l = request.add_partition();
      l->set_begin(r.begin);
      l->set_end(r.end);
    }
    if (j > 0) {
      request.set_previous_address(fleet_->address(j - 1));
      request.set_previous_transport(links_[j - 1]);
    }
    if (j + 1 < stages) {
      request.set_next_address(fleet_->address(j + 1));
      request.set_next_transport(links_[j]);
    }
    request.set_device(job::RequestedDevice(spec_, j));
    request.set_steps_per_epoch(static_cast<uint64_t>(steps_per_epoch_));
  }
  // Every stage builds its blocks at once; a stage opens its links only
  // when a pass starts, so the order does not matter.
  std::vector<petra::v1::AssignResponse> responses(stages);
  absl::Status assigned = StageFleet::ForEach(stages, [&](int j) {
    absl::StatusOr<petra::v1::AssignResponse> response =
        fleet_->Assign(j, requests[j]);
    if (!response.ok()) return response.status();
    responses[j] = std::move(*response);
    return absl::OkStatus();
  });
  if (!assigned.ok()) return assigned;
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    for (int j = 0; j < stages; ++j) {
      job.mutable_stages(j)->set_parameter_count(
          responses[j].parameter_count());
      job.mutable_stages(j)->set_device(responses[j].device());
    }
  });
  return absl::OkStatus();
}

absl::Status FleetRunner::PollStages() {
  absl::StatusOr<std::vector<petra::v1::StageStats>> stats = fleet_->Poll();
  if (!stats.ok()) return stats.status();
  stage_stats_ = std::move(*stats);
  return absl::OkStatus();
}

absl::StatusOr<engine::PassResult> FleetRunner::RunPass(
    petra::v1::Phase phase, const engine::PassBatches& batches) {
  PassWatch watch;
  watch.interrupted = [this] { return Interrupted(); };
  watch.poll = [this] { return PollStages(); };
  watch.progress = [this, &batches](const engine::PassTotals& so_far) {
    petra::v1::Progress p;
    // The epoch the last stage is in (a pass may span several).
    p.set_epoch(batches.EpochOf(
        std::clamp<int64_t>(so_far.micro_batches - 1, 0, batches.size() - 1)));
    p.set_step(steps_done_ +
               so_far.micro_batches / spec_.training().accumulation_steps());
    if (so_far.samples > 0) {
      p.set_train_loss(so_far.mean_loss());
      p.set_train_accuracy(so_far.accuracy());
      p.set_samples_per_second(so_far.samples_per_second());
    }
    Publish(JobEvent::KIND_PROGRESS, std::move(p));
  };
  if (env_.metrics != nullptr) {
    watch.finite_samples = [this](int64_t n) { env_.metrics->TrainSamples(n); };
  }
  FeedOptions feed;
  feed.labels_with_data =
      phase == petra::v1::PHASE_TRAIN &&
      engine::PlanMode(spec_.training()).traffic.labels_with_activations;
  feed.metrics = env_.metrics;
  feed.to_first = feed_to_first_;
  feed.to_last = feed_to_last_;
  feed.wanted = spec_.transport();
  return RunFeedPass(*fleet_, id_, phase, batches, watch, feed);
}

absl::Status FleetRunner::OnTrainPass(uint32_t epoch, uint64_t steps_before,
                                      const engine::PassResult& train) {
  return TrainLog(layout().train_log())
      .Append(epoch, steps_before, spec_.training().accumulation_steps(),
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
  if (progress_) {
    progress_->Complete(ElapsedSeconds(), &p);
  } else {
    engine::ProgressBuilder(spec_, 0).Complete(ElapsedSeconds(), &p);
  }
  if (!p.has_test_accuracy() && last_test_) {
    p.set_test_loss(last_test_->first);
    p.set_test_accuracy(last_test_->second);
  }
  if (p.stages_size() == 0) {
    for (const auto& s : stage_stats_) *p.add_stages() = s;
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
    if (absl::Status end = recovery_.Decide(
            status, ran,
            [&] { return fleet_ != nullptr && fleet_->LostAStage(status); });
        !end.ok()) {
      return end;
    }
    recovery_.Begin(record_, env_.metrics, id_, status);
    ReleaseAll();
    recovering_ = true;
  }
}

}  // namespace petra::coordinator

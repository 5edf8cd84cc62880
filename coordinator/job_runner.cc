#include "coordinator/job_runner.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_resume.h"
#include "petra/v1/stage.grpc.pb.h"
#include "services/cli/durable_file.h"
#include "services/data/dataset.h"
#include "services/engine/job_plan.h"
#include "services/engine/lr_schedule.h"
#include "services/engine/state_file.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/stage_messages.h"
#include "services/wire/status_map.h"
#include "services/wire/stream_sender.h"

namespace petra::coordinator {
namespace {

using petra::v1::Job;
using petra::v1::JobEvent;
using petra::v1::StageService;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// How long a stage may take to answer a control call. A stage that does not
// answer GetStatus within kProbeTimeout is unreachable.
constexpr milliseconds kProbeTimeout{3000};
constexpr milliseconds kControlTimeout{120000};
// A pass in which no micro-batch finishes for this long has stalled.
constexpr milliseconds kStallTimeout{300000};
constexpr milliseconds kProgressInterval{2000};
constexpr uint32_t kReadChunk = 4 << 20;

absl::Status Prefixed(const std::string& prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// The stages of one job: stubs and the addresses they were given.
class Fleet {
 public:
  Fleet(std::vector<std::string> addresses,
        const wire::TransportSecurity& security)
      : addresses_(std::move(addresses)) {
    for (const std::string& a : addresses_) {
      stubs_.push_back(StageService::NewStub(wire::CreateChannel(a, security)));
    }
  }
  int size() const { return static_cast<int>(addresses_.size()); }
  const std::string& address(int j) const { return addresses_[j]; }
  StageService::Stub& stub(int j) { return *stubs_[j]; }
  std::string Name(int j) const {
    return probe_only_ ? absl::StrCat("stage server ", addresses_[j])
                       : absl::StrCat("stage ", j, " (", addresses_[j], ")");
  }
  // Servers probed for a place, not yet stages of the job.
  void set_probe_only() { probe_only_ = true; }

  // GetStatus, with the short deadline that tells a dead stage apart.
  absl::StatusOr<petra::v1::StageStatus> Status(int j) {
    petra::v1::StageStatus status;
    absl::Status s =
        Call(j, &StageService::Stub::GetStatus, petra::v1::GetStatusRequest(),
             &status, kProbeTimeout);
    if (!s.ok()) return s;
    return status;
  }

  template <typename Request, typename Response, typename Method>
  absl::Status Call(int j, Method method, const Request& request,
                    Response* response, milliseconds timeout) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::Status s = (stubs_[j].get()->*method)(&context, request, response);
    if (s.ok()) return absl::OkStatus();
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::UnavailableError(
          absl::StrCat(Name(j), " is unreachable: ", s.error_message()));
    }
    return Prefixed(Name(j) + ": ", wire::FromGrpcStatus(s));
  }

 private:
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<StageService::Stub>> stubs_;
  bool probe_only_ = false;
};

// Completions reported by the stages during one pass.
struct PassCounters {
  mutable std::mutex mu;
  std::condition_variable cv;
  int64_t losses = 0, exits = 0, correct = 0, samples = 0;
  int64_t fed = 0;      // samples of every loss, finite or skipped
  double loss_sum = 0;  // sum over samples
  uint64_t step = 0;
  steady_clock::time_point last_done = steady_clock::now();
  double seconds = 0;  // the pass's duration, once it is over
  std::vector<std::pair<uint64_t, double>> losses_by_id;  // last stage's
};

class Runner {
 public:
  Runner(JobRecord& record, const RunnerEnvironment& env)
      : record_(record), env_(env) {
    const Job job = record.Snapshot();
    id_ = job.id();
    spec_ = job.spec();
  }

  absl::Status Run();
  void ReleaseAll();

 private:
  absl::Status Prepare();
  absl::Status Assign();
  // Picks the job's servers and assigns them: those that answer and are
  // free, the job's own first (after a loss), then the others of --stages
  // in order. Waits up to `wait` for enough of them.
  absl::Status Attach(std::chrono::seconds wait);
  // Loads the newest usable checkpoint into every stage: the job's own, else
  // that of checkpoint.resume_from_job, else none (the seeded initial
  // weights). Sets first_epoch_ and the counters.
  absl::Status RestoreNewest();
  absl::Status LoadCheckpoint(const ResumePoint& point);
  // The epochs from first_epoch_ on.
  absl::Status Train();
  // Whether `failure` came from losing a stage server (crashed, restarted or
  // unreachable) rather than from the job itself.
  bool LostAStage(const absl::Status& failure);
  void BeginRecovery(const absl::Status& cause);
  void EndRecovery(uint32_t restored_epoch);
  // Drops train_log.csv rows of epochs after `epochs` (to be trained again).
  void TrimTrainLog(uint32_t epochs);
  absl::Status Interrupted() const;
  absl::Status RunPass(petra::v1::Phase phase, uint32_t epoch,
                       const data::EpochBatches& batches, int64_t n,
                       PassCounters& counters);
  absl::Status PollStages();
  absl::Status CheckpointAll(uint32_t epoch);
  absl::Status AppendTrainLog(uint32_t epoch, PassCounters& train);
  void Progress(JobEvent::Kind kind, uint32_t epoch, const PassCounters* train,
                std::optional<std::pair<double, double>> test);

  JobRecord& record_;
  const RunnerEnvironment& env_;
  std::string id_;
  petra::v1::JobSpec spec_;
  data::Splits data_;
  int64_t steps_per_epoch_ = 0;
  std::vector<model::BlockRange> ranges_;
  std::unique_ptr<Fleet> fleet_;
  std::vector<petra::v1::StageStats> stage_stats_;
  uint64_t steps_done_ = 0;
  uint64_t samples_seen_ = 0;
  steady_clock::time_point started_ = steady_clock::now();
  steady_clock::time_point pass_started_ = steady_clock::now();
  std::optional<std::pair<double, double>> last_test_;
  uint32_t first_epoch_ = 1;
  // Recoveries since the last finished epoch.
  uint32_t lost_in_a_row_ = 0;
  steady_clock::time_point recovery_started_ = steady_clock::now();
};

absl::Status Runner::Interrupted() const {
  if (record_.cancel_requested()) return absl::CancelledError("cancelled");
  if (record_.stop_requested()) {
    return absl::AbortedError("the coordinator is stopping");
  }
  return absl::OkStatus();
}

absl::Status Runner::Prepare() {
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      spec_, env_.data_root, model::InputShape(spec_.model().variant()));
  if (!data.ok()) return Prefixed("loading the data: ", data.status());
  data_ = std::move(*data);
  absl::StatusOr<int64_t> steps =
      engine::StepsPerEpoch(spec_, data_.train.size());
  if (!steps.ok()) return steps.status();
  steps_per_epoch_ = *steps;
  absl::StatusOr<std::vector<model::BlockRange>> ranges =
      engine::PlanStages(spec_);
  if (!ranges.ok())
    return Prefixed("planning the partition: ", ranges.status());
  ranges_ = std::move(*ranges);
  const int stages = static_cast<int>(ranges_.size());
  if (stages > static_cast<int>(env_.stage_addresses.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job needs ", stages, " stage servers but the fleet has ",
        env_.stage_addresses.size()));
  }
  return absl::OkStatus();
}

absl::Status Runner::Assign() {
  const int stages = fleet_->size();
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    job.clear_stages();
    for (int j = 0; j < stages; ++j) {
      petra::v1::StagePlacement* p = job.add_stages();
      p->set_stage_index(j);
      p->set_address(fleet_->address(j));
      p->set_layer_begin(ranges_[j].begin);
      p->set_layer_end(ranges_[j].end);
      p->set_device(job::DeviceForStage(spec_, j));
    }
  });
  for (int j = 0; j < stages; ++j) {
    petra::v1::AssignRequest request;
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
    if (j > 0) request.set_previous_address(fleet_->address(j - 1));
    if (j + 1 < stages) request.set_next_address(fleet_->address(j + 1));
    request.set_device(job::DeviceForStage(spec_, j));
    request.set_steps_per_epoch(static_cast<uint64_t>(steps_per_epoch_));
    petra::v1::AssignResponse response;
    if (absl::Status s = fleet_->Call(j, &StageService::Stub::Assign, request,
                                      &response, kControlTimeout);
        !s.ok()) {
      return s;
    }
    record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
      job.mutable_stages(j)->set_parameter_count(response.parameter_count());
    });
  }
  return absl::OkStatus();
}

absl::Status Runner::LoadCheckpoint(const ResumePoint& point) {
  std::optional<uint64_t> steps, samples;
  for (int j = 0; j < fleet_->size(); ++j) {
    const std::string& bytes = point.files[j];
    petra::v1::RestoreCheckpointResponse response;
    for (uint64_t offset = 0; offset < bytes.size(); offset += kReadChunk) {
      petra::v1::RestoreCheckpointRequest piece;
      piece.set_job_id(id_);
      piece.set_offset(offset);
      piece.set_total_bytes(bytes.size());
      piece.set_data(bytes.substr(offset, kReadChunk));
      if (absl::Status s =
              fleet_->Call(j, &StageService::Stub::RestoreCheckpoint, piece,
                           &response, kControlTimeout);
          !s.ok()) {
        return s;
      }
    }
    if (!response.restored() || response.epoch() != point.epoch ||
        (steps && (*steps != response.optimizer_steps() ||
                   *samples != response.samples_seen()))) {
      return absl::DataLossError(
          absl::StrCat(point.directory, ": stage ", j,
                       "'s checkpoint disagrees with the "
                       "others (epoch ",
                       response.epoch(), ", ", response.optimizer_steps(),
                       " optimizer steps)"));
    }
    steps = response.optimizer_steps();
    samples = response.samples_seen();
  }
  steps_done_ = *steps;
  samples_seen_ = *samples;
  first_epoch_ = point.epoch + 1;
  std::cout << id_ << ": resumed from " << point.directory << " (epoch "
            << point.epoch << ", " << steps_done_ << " optimizer steps)"
            << std::endl;
  return absl::OkStatus();
}

absl::Status Runner::RestoreNewest() {
  // The job's own checkpoints first: it is recovering, or its coordinator
  // restarted.
  absl::StatusOr<ResumePoint> own =
      FindResumePoint(env_.state_dir, id_, fleet_->size());
  if (own.ok()) {
    for (const std::string& why : own->skipped) {
      std::cout << id_ << ": passed over a checkpoint: " << why << std::endl;
    }
    if (absl::Status s = LoadCheckpoint(*own); !s.ok()) return s;
    TrimTrainLog(own->epoch);
    return absl::OkStatus();
  }
  if (!absl::EndsWith(own.status().message(), "(none written)")) {
    std::cout << id_ << ": " << own.status().message() << std::endl;
  }
  const std::string& from = spec_.checkpoint().resume_from_job();
  if (from.empty()) {
    // No checkpoint yet: start again from the seeded initial weights, which
    // every stage rebuilt when it was assigned.
    first_epoch_ = 1;
    steps_done_ = 0;
    samples_seen_ = 0;
    TrimTrainLog(0);
    return absl::OkStatus();
  }
  absl::StatusOr<ResumePoint> point =
      FindResumePoint(env_.state_dir, from, fleet_->size());
  if (!point.ok()) return Prefixed("resuming: ", point.status());
  for (const std::string& why : point->skipped) {
    std::cout << id_ << ": passed over a checkpoint of " << from << ": " << why
              << std::endl;
  }
  if (point->epoch >= spec_.training().epochs()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resuming: the newest usable checkpoint of job \"", from,
        "\" is after epoch ", point->epoch, " and this job trains ",
        spec_.training().epochs(),
        " epochs: nothing is left to train (ask for more epochs)"));
  }
  if (absl::Status s = LoadCheckpoint(*point); !s.ok()) {
    return Prefixed("resuming: ", s);
  }
  TrimTrainLog(0);
  return absl::OkStatus();
}

void Runner::TrimTrainLog(uint32_t epochs) {
  const std::filesystem::path path = std::filesystem::path(env_.state_dir) /
                                     JobDirectory(id_) / "train_log.csv";
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  bool trimmed = false;
  while (std::getline(in, line)) {
    uint32_t epoch = 0;
    const bool row = absl::SimpleAtoi(line.substr(0, line.find(',')), &epoch);
    if (row && epoch > epochs) {
      trimmed = true;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (!trimmed) return;
  // The rows of epochs trained again are written again; a crash here
  // leaves the old file whole.
  if (absl::Status s = cli::WriteFileAtomically(path, kept); !s.ok()) {
    std::cout << id_ << ": " << s.message() << std::endl;
  }
}

bool Runner::LostAStage(const absl::Status& failure) {
  if (fleet_ == nullptr) return false;
  if (failure.code() == absl::StatusCode::kUnavailable) return true;
  for (int j = 0; j < fleet_->size(); ++j) {
    absl::StatusOr<petra::v1::StageStatus> status = fleet_->Status(j);
    if (!status.ok() || status->job_id() != id_) return true;
  }
  return false;
}

void Runner::BeginRecovery(const absl::Status& cause) {
  recovery_started_ = steady_clock::now();
  std::cout << id_ << ": lost a stage server (" << cause.message()
            << "); recovering" << std::endl;
  if (env_.metrics != nullptr) env_.metrics->Recovery();
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    MarkRecovering(job, std::string(cause.message()));
  });
}

void Runner::EndRecovery(uint32_t restored_epoch) {
  const double seconds =
      std::chrono::duration<double>(steady_clock::now() - recovery_started_)
          .count();
  std::cout << id_ << ": recovered in " << absl::StrFormat("%.1f", seconds)
            << " s from epoch " << restored_epoch << std::endl;
  record_.Update(JobEvent::KIND_STATE, [&](Job& job) {
    if (job.recoveries_size() > 0) {
      petra::v1::Recovery* r =
          job.mutable_recoveries(job.recoveries_size() - 1);
      r->set_restored_epoch(restored_epoch);
      r->set_seconds(seconds);
    }
  });
}

absl::Status Runner::Attach(std::chrono::seconds wait) {
  const int stages = static_cast<int>(ranges_.size());
  // The job's own servers first (its record after a coordinator restart),
  // then the rest of --stages in order.
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
    std::cout << id_ << ": waiting up to " << wait.count() << " s for "
              << stages << " free stage servers" << std::endl;
  }
  Fleet probe(candidates, env_.security);
  probe.set_probe_only();
  while (true) {
    if (absl::Status s = Interrupted(); !s.ok()) return s;
    std::vector<std::string> chosen, held, missing;
    for (int i = 0; i < probe.size(); ++i) {
      if (static_cast<int>(chosen.size()) == stages) break;
      absl::StatusOr<petra::v1::StageStatus> status = probe.Status(i);
      if (!status.ok()) {
        missing.push_back(std::string(status.status().message()));
        continue;
      }
      // This coordinator runs one job at a time: a job a server still
      // holds is this one's, or left over from before a restart. It is
      // released below rather than waited for forever.
      if (status->state() == petra::v1::StageStatus::STATE_IDLE ||
          !status->job_id().empty()) {
        chosen.push_back(probe.address(i));
        held.push_back(status->job_id());
      } else {
        missing.push_back(
            absl::StrCat(probe.Name(i), " is ",
                         petra::v1::StageStatus::State_Name(status->state())));
      }
    }
    if (static_cast<int>(chosen.size()) == stages) {
      fleet_ = std::make_unique<Fleet>(std::move(chosen), env_.security);
      for (int j = 0; j < stages; ++j) {
        if (held[j].empty()) continue;
        petra::v1::ReleaseRequest release;
        release.set_job_id(held[j]);
        petra::v1::ReleaseResponse released;
        if (absl::Status s = fleet_->Call(j, &StageService::Stub::Release,
                                          release, &released, kControlTimeout);
            !s.ok()) {
          return Prefixed(
              absl::StrCat("releasing the stale job \"", held[j], "\": "), s);
        }
      }
      return Assign();
    }
    if (steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the job needs ", stages,
          stages == 1 ? " stage server and " : " stage servers and only ",
          chosen.size(), " answered and were free",
          wait.count() > 0 ? absl::StrCat(" within ", wait.count(),
                                          " s (--recovery-timeout)")
                           : "",
          ": ", absl::StrJoin(missing, "; ")));
    }
    std::this_thread::sleep_for(milliseconds(500));
  }
}

void Runner::ReleaseAll() {
  if (fleet_ == nullptr) return;
  for (int j = 0; j < fleet_->size(); ++j) {
    petra::v1::ReleaseRequest request;
    request.set_job_id(id_);
    petra::v1::ReleaseResponse response;
    // Best effort: a stage that is gone holds nothing.
    fleet_
        ->Call(j, &StageService::Stub::Release, request, &response,
               milliseconds(10000))
        .IgnoreError();
  }
}

absl::Status Runner::PollStages() {
  std::vector<petra::v1::StageStats> stats;
  for (int j = 0; j < fleet_->size(); ++j) {
    absl::StatusOr<petra::v1::StageStatus> status = fleet_->Status(j);
    if (!status.ok()) return status.status();
    if (status->job_id() != id_) {
      return absl::AbortedError(absl::StrCat(
          fleet_->Name(j), " no longer holds the job (it was restarted?)"));
    }
    if (status->state() == petra::v1::StageStatus::STATE_FAILED) {
      return wire::FromProtoStatus(status->error());
    }
    petra::v1::StageStats s = status->stats();
    s.set_stage_index(j);
    s.set_address(fleet_->address(j));
    stats.push_back(std::move(s));
  }
  stage_stats_ = std::move(stats);
  return absl::OkStatus();
}

void Runner::Progress(JobEvent::Kind kind, uint32_t epoch,
                      const PassCounters* train,
                      std::optional<std::pair<double, double>> test) {
  const int64_t total_steps = [&] {
    int64_t t = steps_per_epoch_ * spec_.training().epochs();
    if (spec_.training().max_steps() > 0) {
      t = std::min<int64_t>(t, spec_.training().max_steps());
    }
    return t;
  }();
  const double elapsed =
      std::chrono::duration<double>(steady_clock::now() - started_).count();
  petra::v1::Progress p;
  p.set_epoch(epoch);
  p.set_total_epochs(spec_.training().epochs());
  p.set_total_steps(static_cast<uint64_t>(total_steps));
  p.set_elapsed_seconds(elapsed);
  uint64_t step = steps_done_;
  if (train != nullptr) {
    std::lock_guard<std::mutex> lock(train->mu);
    // During the pass, steps_done_ holds the steps before it.
    if (kind == JobEvent::KIND_PROGRESS) {
      step += train->losses / spec_.training().accumulation_steps();
    }
    if (train->samples > 0) {
      p.set_train_loss(train->loss_sum / train->samples);
      p.set_train_accuracy(static_cast<double>(train->correct) /
                           train->samples);
      const double pass_seconds = train->seconds > 0
                                      ? train->seconds
                                      : std::chrono::duration<double>(
                                            steady_clock::now() - pass_started_)
                                            .count();
      if (pass_seconds > 0) {
        p.set_samples_per_second(train->samples / pass_seconds);
      }
    }
  }
  p.set_step(step);
  if (step > 0 && total_steps > 0) {
    p.set_eta_seconds(elapsed / step *
                      (total_steps - static_cast<int64_t>(step)));
  }
  p.set_learning_rate(engine::LrSchedule(spec_, steps_per_epoch_)
                          .At(std::max<int64_t>(0, step - 1)));
  if (test) last_test_ = test;
  if (last_test_) {
    p.set_test_loss(last_test_->first);
    p.set_test_accuracy(last_test_->second);
  }
  for (const auto& s : stage_stats_) *p.add_stages() = s;
  if (env_.metrics != nullptr) env_.metrics->Progress(p);
  record_.Update(kind, [&](Job& job) {
    // An epoch-end event keeps the finished epoch's training figures.
    if (kind != JobEvent::KIND_EPOCH_END && train == nullptr &&
        job.has_progress()) {
      p.set_train_loss(job.progress().train_loss());
      p.set_train_accuracy(job.progress().train_accuracy());
      p.set_samples_per_second(job.progress().samples_per_second());
    }
    *job.mutable_progress() = p;
  });
}

absl::Status Runner::RunPass(petra::v1::Phase phase, uint32_t epoch,
                             const data::EpochBatches& batches, int64_t n,
                             PassCounters& c) {
  const int stages = fleet_->size();
  for (int j = 0; j < stages; ++j) {
    petra::v1::StartRequest request;
    request.set_job_id(id_);
    request.set_phase(phase);
    request.set_epoch(epoch);
    request.set_micro_batches(static_cast<uint64_t>(n));
    petra::v1::StartResponse response;
    if (absl::Status s = fleet_->Call(j, &StageService::Stub::Start, request,
                                      &response, kControlTimeout);
        !s.ok()) {
      return s;
    }
  }
  pass_started_ = steady_clock::now();
  CoordinatorMetrics* metrics =
      phase == petra::v1::PHASE_TRAIN ? env_.metrics : nullptr;
  auto on_done = [&c, stages, phase,
                  metrics](const petra::v1::MicroBatchDone& d) {
    std::lock_guard<std::mutex> lock(c.mu);
    if (d.phase() != phase) return;
    if (static_cast<int>(d.stage_index()) == stages - 1) {
      ++c.losses;
      c.fed += d.samples();
      c.losses_by_id.emplace_back(d.micro_batch_id(), d.loss());
      // A micro-batch skipped for a NaN or Inf (training.non_finite) is
      // in the loss log but not in the epoch's mean loss and accuracy.
      if (std::isfinite(d.loss())) {
        c.loss_sum += d.loss() * d.samples();
        if (metrics != nullptr) metrics->TrainSamples(d.samples());
        c.correct += d.correct();
        c.samples += d.samples();
      }
    } else if (d.stage_index() == 0) {
      ++c.exits;
    }
    c.step = std::max(c.step, d.step());
    c.last_done = steady_clock::now();
    c.cv.notify_all();
  };
  using FeedSender = wire::StreamSender<petra::v1::ForwardMessage>;
  auto open = [&](int j) {
    return std::make_unique<FeedSender>(
        fleet_->Name(j),
        [this, j](grpc::ClientContext* ctx) {
          return fleet_->stub(j).Forward(ctx);
        },
        on_done);
  };
  std::unique_ptr<FeedSender> data = open(0);
  std::unique_ptr<FeedSender> labels = stages > 1 ? open(stages - 1) : nullptr;

  // The feed runs on its own thread so this one can watch the stages and
  // the cancel flag while the feed waits for credits.
  absl::Status feed_status;
  std::atomic<bool> feed_over{false};
  std::thread feeder([&] {
    for (int64_t m = 0; m < n && feed_status.ok(); ++m) {
      data::Batch b = batches.Get(m);
      wire::ForwardPayload p;
      p.header.job_id = id_;
      p.header.micro_batch_id = static_cast<uint64_t>(m);
      p.header.phase = phase;
      p.header.sender_stage = -1;
      p.header.epoch = epoch;
      p.x = {b.images, {}};
      if (stages == 1) p.labels = b.labels;
      auto parts = wire::EncodeForward(p, wire::kTensorChunkBytes);
      feed_status = parts.ok() ? data->Send(*parts) : parts.status();
      if (!feed_status.ok() || stages == 1) continue;
      p.x = {};
      p.labels = b.labels;
      parts = wire::EncodeForward(p, wire::kTensorChunkBytes);
      feed_status = parts.ok() ? labels->Send(*parts) : parts.status();
    }
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
      complete = c.losses >= n && (phase == petra::v1::PHASE_EVAL ||
                                   stages == 1 || c.exits >= n);
      last_done = c.last_done;
    }
    if (complete) break;
    if (absl::Status s = Interrupted(); !s.ok()) {
      status = s;
      break;
    }
    if (feed_over && !feed_status.ok()) {
      status = feed_status;
      break;
    }
    if (absl::Status s = data->health(); !s.ok()) {
      status = s;
      break;
    }
    if (labels != nullptr) {
      if (absl::Status s = labels->health(); !s.ok()) {
        status = s;
        break;
      }
    }
    if (steady_clock::now() - last_poll > milliseconds(1000)) {
      last_poll = steady_clock::now();
      if (absl::Status s = PollStages(); !s.ok()) {
        status = s;
        break;
      }
    }
    if (steady_clock::now() - last_done > kStallTimeout) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "no micro-batch finished in ", kStallTimeout.count() / 1000,
          " s; the pipeline is stuck"));
      break;
    }
    if (phase == petra::v1::PHASE_TRAIN &&
        steady_clock::now() - last_progress > kProgressInterval) {
      last_progress = steady_clock::now();
      Progress(JobEvent::KIND_PROGRESS, epoch, &c, std::nullopt);
    }
  }
  if (!status.ok()) {
    data->Cancel();
    if (labels) labels->Cancel();
  }
  feeder.join();
  for (FeedSender* s : {data.get(), labels.get()}) {
    if (s == nullptr) continue;
    absl::Status closed = s->Close();
    if (status.ok() && !closed.ok()) status = closed;
  }
  if (status.ok()) status = PollStages();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.seconds =
        std::chrono::duration<double>(steady_clock::now() - pass_started_)
            .count();
  }
  return status;
}

// Every training micro-batch's loss, for plots and for comparing runners:
// jobs/<id>/train_log.csv (epoch, micro-batch of the epoch, optimizer step
// it counted towards, loss).
absl::Status Runner::AppendTrainLog(uint32_t epoch, PassCounters& train) {
  const std::filesystem::path path = std::filesystem::path(env_.state_dir) /
                                     JobDirectory(id_) / "train_log.csv";
  const bool fresh = !std::filesystem::exists(path);
  std::ofstream out(path, std::ios::app);
  if (fresh) out << "epoch,micro_batch,step,loss\n";
  std::lock_guard<std::mutex> lock(train.mu);
  std::sort(train.losses_by_id.begin(), train.losses_by_id.end());
  const uint64_t k = spec_.training().accumulation_steps();
  for (const auto& [id, loss] : train.losses_by_id) {
    out << epoch << "," << id << "," << steps_done_ + id / k << ","
        << absl::StrFormat("%.9g", loss) << "\n";
  }
  out.flush();
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  }
  return absl::OkStatus();
}

absl::Status Runner::CheckpointAll(uint32_t epoch) {
  const std::string name = absl::StrCat("epoch-", epoch);
  const std::filesystem::path dir = std::filesystem::path(env_.state_dir) /
                                    JobDirectory(id_) / "checkpoints" / name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  std::vector<std::string> files;
  for (int j = 0; j < fleet_->size(); ++j) {
    petra::v1::CheckpointRequest request;
    request.set_job_id(id_);
    request.set_name(name);
    request.set_step(steps_done_);
    request.set_epoch(epoch);
    request.set_samples_seen(samples_seen_);
    petra::v1::CheckpointResponse written;
    if (absl::Status s = fleet_->Call(j, &StageService::Stub::Checkpoint,
                                      request, &written, kControlTimeout);
        !s.ok()) {
      return s;
    }
    // Keep a copy: the stage's disk may be gone when the job is exported.
    std::string bytes;
    while (bytes.size() < written.size_bytes() || written.size_bytes() == 0) {
      petra::v1::ReadCheckpointRequest read;
      read.set_job_id(id_);
      read.set_path(written.path());
      read.set_offset(bytes.size());
      read.set_max_bytes(kReadChunk);
      petra::v1::ReadCheckpointResponse piece;
      if (absl::Status s = fleet_->Call(j, &StageService::Stub::ReadCheckpoint,
                                        read, &piece, kControlTimeout);
          !s.ok()) {
        return s;
      }
      if (piece.data().empty()) break;
      bytes += piece.data();
    }
    if (bytes.size() != written.size_bytes()) {
      return absl::DataLossError(absl::StrCat(
          fleet_->Name(j), ": checkpoint read back as ", bytes.size(),
          " bytes, written as ", written.size_bytes()));
    }
    const std::string sha256 = cli::Sha256Hex(bytes);
    if (sha256 != written.sha256()) {
      return absl::DataLossError(
          absl::StrCat(fleet_->Name(j), ": checkpoint read back with SHA-256 ",
                       sha256, ", written with ", written.sha256()));
    }
    // The checksum beside the file lets a resume tell a damaged copy.
    const std::filesystem::path file = dir / absl::StrCat("stage-", j, ".pt");
    if (absl::Status s = cli::WriteFileAtomically(file, bytes); !s.ok()) {
      return s;
    }
    if (absl::Status s =
            cli::WriteFileAtomically(file.string() + ".sha256", sha256 + "\n");
        !s.ok()) {
      return s;
    }
    files.push_back(std::move(bytes));
  }
  absl::StatusOr<std::string> exported = engine::MergeForExport(files);
  if (!exported.ok()) return exported.status();
  if (absl::Status s =
          cli::WriteFileAtomically(ExportPath(env_.state_dir, id_), *exported);
      !s.ok()) {
    return s;
  }

  const std::string rel =
      (std::filesystem::path(JobDirectory(id_)) / "checkpoints" / name)
          .string();
  // Keep the newest keep_last, by epoch: read from the disk, so checkpoints
  // of an earlier coordinator process count too.
  std::vector<std::pair<uint32_t, std::filesystem::path>> all;
  for (const auto& entry :
       std::filesystem::directory_iterator(dir.parent_path(), ec)) {
    uint32_t n = 0;
    const std::string base = entry.path().filename().string();
    if (absl::StartsWith(base, "epoch-") &&
        absl::SimpleAtoi(base.substr(6), &n) && n <= epoch) {
      all.emplace_back(n, entry.path());
    }
  }
  std::sort(all.rbegin(), all.rend());
  const uint32_t keep = std::max<uint32_t>(
      1,
      spec_.checkpoint().has_keep_last() ? spec_.checkpoint().keep_last() : 2);
  for (size_t i = keep; i < all.size(); ++i) {
    std::filesystem::remove_all(all[i].second, ec);
  }
  record_.Update(JobEvent::KIND_CHECKPOINT,
                 [&](Job& job) { job.set_last_checkpoint(rel); });
  return absl::OkStatus();
}

absl::Status Runner::Run() {
  started_ = steady_clock::now();
  // A job found RECOVERING was running when its coordinator stopped.
  bool recovering =
      record_.Snapshot().state() == petra::v1::JOB_STATE_RECOVERING;
  if (absl::Status s = Prepare(); !s.ok()) return s;
  while (true) {
    if (absl::Status s = Interrupted(); !s.ok()) return s;
    // Too few servers, even after the recovery wait, ends the job.
    if (absl::Status s = Attach(recovering ? env_.recovery_timeout
                                           : std::chrono::seconds(0));
        !s.ok()) {
      return s;
    }
    absl::Status status = RestoreNewest();
    if (status.ok()) {
      if (recovering) EndRecovery(first_epoch_ - 1);
      record_.Update(JobEvent::KIND_STATE, [](Job& job) {
        job.set_state(petra::v1::JOB_STATE_RUNNING);
        if (!job.has_start_time()) {
          *job.mutable_start_time() =
              google::protobuf::util::TimeUtil::GetCurrentTime();
        }
      });
      if (first_epoch_ > 1) {
        Progress(JobEvent::KIND_PROGRESS, first_epoch_ - 1, nullptr,
                 std::nullopt);
      }
      status = Train();
    }
    if (status.ok() || !Interrupted().ok()) return status;
    // A job that never ran fails at once (its fleet is likely misnamed); a
    // running one waits for its lost stage and resumes.
    const bool ran = recovering || record_.Snapshot().has_start_time();
    if (!ran || env_.recovery_timeout.count() == 0 || !LostAStage(status)) {
      return status;
    }
    if (++lost_in_a_row_ > env_.max_recoveries) {
      return Prefixed(
          absl::StrCat("gave up after ", env_.max_recoveries,
                       " recoveries in a row without finishing an epoch "
                       "(--max-recoveries): "),
          status);
    }
    BeginRecovery(status);
    ReleaseAll();
    recovering = true;
  }
}

absl::Status Runner::Train() {
  const uint32_t first_epoch = first_epoch_;
  const uint32_t epochs = spec_.training().epochs();
  const uint32_t eval_every = spec_.evaluation().every_epochs();
  const uint32_t ckpt_every = spec_.checkpoint().every_epochs();
  for (uint32_t e = first_epoch; e <= epochs; ++e) {
    data::EpochBatches batches(data_.train, engine::TrainBatchOptions(spec_),
                               e - 1);
    const int64_t n = engine::TrainMicroBatches(
        spec_, batches.size(), static_cast<int64_t>(steps_done_));
    if (n == 0) break;
    PassCounters train;
    if (absl::Status s = RunPass(petra::v1::PHASE_TRAIN, e, batches, n, train);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = AppendTrainLog(e, train); !s.ok()) return s;
    steps_done_ += n / spec_.training().accumulation_steps();
    samples_seen_ += train.fed;
    const bool capped = spec_.training().max_steps() > 0 &&
                        steps_done_ >= spec_.training().max_steps();
    const bool final_epoch = e == epochs || capped;
    std::optional<std::pair<double, double>> test;
    if (e % eval_every == 0 || final_epoch) {
      data::EpochBatches test_batches(data_.test,
                                      engine::EvalBatchOptions(spec_), 0);
      PassCounters eval;
      if (test_batches.size() > 0) {
        if (absl::Status s = RunPass(petra::v1::PHASE_EVAL, e, test_batches,
                                     test_batches.size(), eval);
            !s.ok()) {
          return s;
        }
        if (eval.samples > 0) {
          test =
              std::make_pair(eval.loss_sum / eval.samples,
                             static_cast<double>(eval.correct) / eval.samples);
        }
      }
    }
    // Progress of the finished epoch, with the pass's own counters.
    Progress(JobEvent::KIND_EPOCH_END, e, &train, test);
    lost_in_a_row_ = 0;
    if ((ckpt_every > 0 && e % ckpt_every == 0) || final_epoch) {
      if (absl::Status s = CheckpointAll(e); !s.ok()) {
        return Prefixed("checkpoint: ", s);
      }
    }
    if (capped) break;
  }
  return absl::OkStatus();
}

}  // namespace

std::string JobDirectory(const std::string& job_id) { return "jobs/" + job_id; }

std::string ExportPath(const std::string& state_dir,
                       const std::string& job_id) {
  return (std::filesystem::path(state_dir) / JobDirectory(job_id) / "model.pt")
      .string();
}

void RunJob(JobRecord& record, const RunnerEnvironment& env) {
  record.Update(JobEvent::KIND_STATE, [](Job& job) {
    if (job.state() != petra::v1::JOB_STATE_RECOVERING) {
      job.set_state(petra::v1::JOB_STATE_STARTING);
    }
  });
  Runner runner(record, env);
  absl::Status status = runner.Run();
  runner.ReleaseAll();
  if (!status.ok() && record.stop_requested() && !record.cancel_requested()) {
    // Not an end: the next coordinator on this --state-dir resumes it.
    record.Update(JobEvent::KIND_STATE, [&](Job& job) {
      MarkRecovering(job,
                     "the coordinator stopped while the job was running; it "
                     "resumes when a coordinator starts again on the same "
                     "--state-dir");
    });
    return;
  }
  record.Update(JobEvent::KIND_STATE, [&](Job& job) {
    *job.mutable_end_time() =
        google::protobuf::util::TimeUtil::GetCurrentTime();
    if (status.ok()) {
      job.set_state(petra::v1::JOB_STATE_SUCCEEDED);
    } else if (record.cancel_requested()) {
      job.set_state(petra::v1::JOB_STATE_CANCELLED);
    } else {
      job.set_state(petra::v1::JOB_STATE_FAILED);
      *job.mutable_error() = wire::ToProtoStatus(status);
    }
  });
}

}  // namespace petra::coordinator

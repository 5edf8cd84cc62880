#include "coordinator/job_manager.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/fleet_control.h"
#include "coordinator/job_layout.h"
#include "coordinator/job_resume.h"
#include "coordinator/torchscript_file.h"
#include "services/base/paths.h"
#include "services/base/timestamp.h"
#include "services/data/dataset.h"
#include "services/job/enum_names.h"
#include "services/job/job_spec_validation.h"

namespace petra::coordinator {
namespace {

using petra::v1::Job;

constexpr uint32_t kDefaultPageSize = 100;
constexpr uint32_t kMaxPageSize = 1000;

absl::Status NoSuchJob(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
}

std::string RecordPath(const std::string& state_dir, const std::string& id) {
  return JobLayout(state_dir, id).record().string();
}

}  // namespace

namespace {

// The stage servers a job takes: its stages in every replica.
int ServersNeeded(const petra::v1::JobSpec& spec) {
  return job::StageCount(spec) *
         static_cast<int>(std::max<uint32_t>(1, spec.replicas()));
}

RunnerEnvironment WithClaims(RunnerEnvironment env, ServerClaims* claims) {
  env.claims = claims;
  return env;
}

}  // namespace

JobManager::JobManager(RunnerEnvironment env, UserLimits limits)
    : env_(WithClaims(std::move(env), &claims_)), limits_(limits) {
  LoadRecords();
  scheduler_ = std::thread([this] { Schedule(); });
}

JobManager::~JobManager() { Stop(); }

void JobManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Not a cancel: the running job lets go of its stages and stays
    // resumable; queued jobs stay queued for the next coordinator.
    for (auto& [id, record] : jobs_) record->RequestStop();
    cv_.notify_all();
  }
  if (scheduler_.joinable()) scheduler_.join();
}

// Jobs of an earlier run of this coordinator: finished ones are listed and
// exportable again; a job that was running is recovered (from its newest
// checkpoint, on its own servers or spares), then the queued ones run in
// their order.
void JobManager::LoadRecords() {
  std::error_code ec;
  const std::filesystem::path root = JobLayout::JobsRoot(env_.state_dir);
  std::vector<Job> found;
  std::vector<std::string> recovering;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    std::ifstream in(
        JobLayout(env_.state_dir, entry.path().filename().string()).record());
    std::string json((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    Job job;
    if (json.empty() ||
        !google::protobuf::util::JsonStringToMessage(json, &job).ok() ||
        job.id() != entry.path().filename().string()) {
      continue;  // not a record of ours
    }
    found.push_back(std::move(job));
  }
  std::sort(found.begin(), found.end(), [](const Job& a, const Job& b) {
    return a.create_time() < b.create_time() ||
           (a.create_time() == b.create_time() && a.id() < b.id());
  });
  for (Job& job : found) {
    uint64_t n = 0;
    if (absl::StartsWith(job.id(), "job-") &&
        absl::SimpleAtoi(job.id().substr(4), &n)) {
      next_id_ = std::max(next_id_, n + 1);
    }
    const bool queued = job.state() == petra::v1::JOB_STATE_QUEUED;
    const bool interrupted = !queued && !IsTerminal(job.state());
    if (interrupted) {
      // A job RECOVERING already has the entry saying why (a stage was
      // lost, or a graceful stop); a crash of the coordinator left none.
      const bool noted = job.state() == petra::v1::JOB_STATE_RECOVERING &&
                         job.recoveries_size() > 0 &&
                         job.recoveries().rbegin()->seconds() == 0;
      if (noted) {
        job.set_state(petra::v1::JOB_STATE_RECOVERING);
      } else {
        MarkRecovering(job,
                       "the coordinator stopped while the job was running");
      }
    }
    const std::string id = job.id();
    jobs_[id] = std::make_shared<JobRecord>(
        std::move(job), RecordPath(env_.state_dir, id), [this] { Count(); });
    order_.push_back(id);
    if (interrupted) {
      recovering.push_back(id);
      // Its recovery starts in this process: counted here, as a lost
      // stage's is where it is lost.
      if (env_.metrics != nullptr) env_.metrics->Recovery();
    } else if (queued) {
      queue_.push_back(id);
    }
  }
  // The interrupted job held the fleet: it goes first.
  queue_.insert(queue_.begin(), recovering.begin(), recovering.end());
}

absl::StatusOr<Job> JobManager::Queue(const petra::v1::JobSpec& spec,
                                      const std::string& owner) {
  absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(spec);
  if (!resolved.ok()) return resolved.status();
  const int stages = job::StageCount(*resolved);
  const int replicas =
      static_cast<int>(std::max<uint32_t>(1, resolved->replicas()));
  const int servers = ServersNeeded(*resolved);
  const int fleet = static_cast<int>(env_.fleet->Addresses().size());
  if (servers > fleet) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job needs ", servers, " stage servers",
        replicas > 1
            ? absl::StrCat(" (", replicas, " replicas x ", stages, " stages)")
            : "",
        " but the fleet has ", fleet,
        " (--stages and registered servers): ", servers - fleet, " short"));
  }
  if (limits_.servers > 0 && servers > limits_.servers) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job needs ", servers,
                     " stage servers but a user may "
                     "hold at most ",
                     limits_.servers,
                     " at once (the coordinator's --max-servers-per-user)"));
  }
  if (replicas > 1) {
    if (env_.replica_store == nullptr) {
      return absl::FailedPreconditionError(
          "replicas: this coordinator hosts no replica store");
    }
    if (absl::Status s = env_.replica_store->Usable(); !s.ok()) return s;
  }
  // Refused at submission, not when the job starts: the path may not leave
  // --data-root, and the folders it names must be there.
  if (absl::Status s = data::CheckDatasetFolder(*resolved, env_.data_root);
      !s.ok()) {
    return s;
  }
  // An image folder's class count, where the spec leaves it out: only the
  // data here can say it (validated again, now that it is known).
  if (absl::Status s = data::FillFromData(&*resolved, env_.data_root);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = job::ValidateJobSpec(*resolved); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("the coordinator is stopping");
  if (const std::string& from = resolved->checkpoint().resume_from_job();
      !from.empty()) {
    auto it = jobs_.find(from);
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no job with id \"", from, "\" to resume"));
    }
    const Job earlier = it->second->Snapshot();
    switch (earlier.state()) {
      case petra::v1::JOB_STATE_QUEUED:
      case petra::v1::JOB_STATE_STARTING:
      case petra::v1::JOB_STATE_RUNNING:
      case petra::v1::JOB_STATE_RECOVERING:
        return absl::FailedPreconditionError(absl::StrCat(
            "job \"", from, "\" has not ended; resume it once it has"));
      default:
        break;
    }
    if (earlier.last_checkpoint().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job \"", from, "\" wrote no checkpoint to resume from"));
    }
    if (absl::Status s = CheckResumable(earlier.spec(), *resolved); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot resume job \"", from, "\": ", s.message()));
    }
  }
  Job job;
  job.set_id(absl::StrCat("job-", next_id_++));
  *job.mutable_spec() = *resolved;
  job.set_state(petra::v1::JOB_STATE_QUEUED);
  job.set_owner(owner);
  *job.mutable_create_time() = base::NowTimestamp();
  std::error_code ec;
  const std::filesystem::path dir =
      JobLayout(env_.state_dir, job.id()).directory();
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  const std::string id = job.id();
  auto record = std::make_shared<JobRecord>(job, RecordPath(env_.state_dir, id),
                                            [this] { Count(); });
  jobs_[id] = record;
  order_.push_back(id);
  queue_.push_back(id);
  cv_.notify_all();
  return job;
}

absl::StatusOr<Job> JobManager::Submit(const petra::v1::JobSpec& spec,
                                       const std::string& owner) {
  absl::StatusOr<Job> job = Queue(spec, owner);
  if (job.ok()) Count();
  return job;
}

void JobManager::Count() {
  if (env_.metrics == nullptr) return;
  std::vector<std::shared_ptr<JobRecord>> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : jobs_) records.push_back(r);
  }
  std::vector<petra::v1::JobState> states;
  for (const auto& r : records) states.push_back(r->Snapshot().state());
  env_.metrics->JobStates(states);
}

void JobManager::Schedule() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // Ended jobs' threads are joined here, so none outlives its record.
    for (const std::string& id : ended_) {
      auto it = running_.find(id);
      if (it != running_.end()) {
        it->second.join();
        running_.erase(it);
      }
    }
    ended_.clear();
    std::vector<std::shared_ptr<JobRecord>> cancelled;
    StartNext(&cancelled);
    if (!cancelled.empty()) {
      // Outside mu_: a record's update counts the jobs (Count locks mu_).
      lock.unlock();
      for (const auto& record : cancelled) {
        record->Update(petra::v1::JobEvent::KIND_STATE, [](Job& job) {
          job.set_state(petra::v1::JOB_STATE_CANCELLED);
          *job.mutable_end_time() = base::NowTimestamp();
        });
      }
      lock.lock();
      continue;
    }
    cv_.wait_for(lock, std::chrono::seconds(1));
  }
  std::map<std::string, std::thread> running = std::move(running_);
  lock.unlock();
  for (auto& [id, thread] : running) thread.join();
  // Whatever is still queued stays queued on disk: the next coordinator
  // on this --state-dir runs it.
}

void JobManager::StartNext(std::vector<std::shared_ptr<JobRecord>>* cancelled) {
  // The queue's order: interrupted jobs (at its front) first, then the
  // highest priority, then the earliest. Each job's rank is read once.
  std::vector<std::pair<int32_t, std::string>> order;
  for (const std::string& id : queue_) {
    const Job j = jobs_[id]->Snapshot();
    order.emplace_back(j.state() == petra::v1::JOB_STATE_RECOVERING
                           ? INT32_MAX
                           : j.spec().priority(),
                       id);
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& ranked : order) {
    // A name, not a structured binding: the lambdas below capture it.
    const std::string& id = ranked.second;
    std::shared_ptr<JobRecord> record = jobs_[id];
    auto drop = [&] {
      queue_.erase(std::find(queue_.begin(), queue_.end(), id));
    };
    if (record->cancel_requested()) {  // cancelled while queued
      drop();
      cancelled->push_back(record);
      continue;
    }
    const Job job = record->Snapshot();
    const int servers = ServersNeeded(job.spec());
    // A user at a limit waits; the jobs of others behind go ahead.
    if (!job.owner().empty() &&
        ((limits_.running_jobs > 0 &&
          claims_.JobsOf(job.owner()) >= limits_.running_jobs) ||
         (limits_.servers > 0 &&
          claims_.ServersOf(job.owner()) + servers > limits_.servers))) {
      continue;
    }
    if (!claims_.Reserve(id, job.owner(), servers, env_.fleet->Addresses())) {
      break;  // the next job waits for servers; nothing passes it
    }
    drop();
    running_[id] = std::thread([this, id, record] {
      RunJobCatching(*record, env_);
      claims_.Release(id);
      std::lock_guard<std::mutex> lock(mu_);
      ended_.push_back(id);
      cv_.notify_all();
    });
  }
}

std::shared_ptr<JobRecord> JobManager::Find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

absl::StatusOr<Job> JobManager::Get(const std::string& id) {
  std::shared_ptr<JobRecord> r = Find(id);
  if (r == nullptr) return NoSuchJob(id);
  return r->Snapshot();
}

absl::StatusOr<petra::v1::ListJobsResponse> JobManager::List(
    const petra::v1::ListJobsRequest& request, const std::string& caller) {
  uint32_t size =
      request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  size = std::min(size, kMaxPageSize);
  // The token is the position (from the newest) where the page starts.
  uint64_t start = 0;
  if (!request.page_token().empty() &&
      !absl::SimpleAtoi(request.page_token(), &start)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token \"", request.page_token(),
                     "\" is not one a ListJobs response returned"));
  }
  std::vector<std::shared_ptr<JobRecord>> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      records.push_back(jobs_[*it]);
    }
  }
  petra::v1::ListJobsResponse response;
  uint64_t position = 0;
  for (const auto& r : records) {
    Job job = r->Snapshot();
    if (request.state() != petra::v1::JOB_STATE_UNSPECIFIED &&
        job.state() != request.state()) {
      continue;
    }
    if (request.mine() && job.owner() != caller) continue;
    if (position++ < start) continue;
    if (response.jobs_size() == static_cast<int>(size)) {
      response.set_next_page_token(absl::StrCat(position - 1));
      break;
    }
    *response.add_jobs() = std::move(job);
  }
  return response;
}

absl::StatusOr<Job> JobManager::Cancel(const std::string& id) {
  std::shared_ptr<JobRecord> r = Find(id);
  if (r == nullptr) return NoSuchJob(id);
  // An ended job stays as it ended: saying "cancelling" would be false.
  if (const petra::v1::JobState state = r->Snapshot().state();
      IsTerminal(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job \"", id, "\" has already ended (",
                     job::EnumShortName(state), "): nothing to cancel"));
  }
  r->RequestCancel();
  // A queued job ends here; a running one ends when its runner notices
  // (within a second) and has released its stages.
  r->Update(petra::v1::JobEvent::KIND_STATE, [](Job& job) {
    if (job.state() == petra::v1::JOB_STATE_QUEUED) {
      job.set_state(petra::v1::JOB_STATE_CANCELLED);
      *job.mutable_end_time() = base::NowTimestamp();
    }
  });
  return r->Snapshot();
}

absl::Status JobManager::Watch(const std::string& id,
                               std::shared_ptr<JobWatcher> w) {
  std::shared_ptr<JobRecord> r = Find(id);
  if (r == nullptr) return NoSuchJob(id);
  r->Subscribe(std::move(w));
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::ExportFile(
    const std::string& id, petra::v1::ExportJobRequest::Format format) {
  std::shared_ptr<JobRecord> r = Find(id);
  if (r == nullptr) return NoSuchJob(id);
  const JobLayout layout(env_.state_dir, id);
  const std::string path = layout.export_file().string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job \"", id, "\" has no checkpoint yet (state ",
                     petra::v1::JobState_Name(r->Snapshot().state()), ")"));
  }
  if (format != petra::v1::ExportJobRequest::FORMAT_TORCHSCRIPT) return path;
  return TorchScriptFile(layout, r->Snapshot(), env_.data_root);
}

petra::v1::ListServersResponse JobManager::ListServers() {
  return DescribeFleet(env_.fleet->Members(), ConnectorOf(env_));
}

}  // namespace petra::coordinator

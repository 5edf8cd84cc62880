// FleetRunner taking its servers: finding free ones (waiting for them, or
// for servers other jobs hold), placing the stages on them, and assigning
// each stage its blocks.
#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/fleet_runner.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/job_spec_validation.h"

namespace petra::coordinator {

using petra::v1::Job;
using petra::v1::JobEvent;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

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
  request.set_data_key(p.fleet->data_key(j));
  if (j > 0) {
    request.set_previous_address(p.fleet->address(j - 1));
    request.set_previous_transport(p.links[j - 1]);
    request.set_previous_data_key(p.fleet->data_key(j - 1));
  }
  if (j + 1 < stages) {
    request.set_next_address(p.fleet->address(j + 1));
    request.set_next_transport(p.links[j]);
    request.set_next_data_key(p.fleet->data_key(j + 1));
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

}  // namespace petra::coordinator

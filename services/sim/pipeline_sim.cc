#include "services/sim/pipeline_sim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace petra::sim {
namespace {

using schedule::OpKind;
using schedule::ScheduledOp;

bool Forwards(OpKind k) { return k != OpKind::kBackward; }

bool Backwards(OpKind k) { return k != OpKind::kForward; }

struct Event {
  double time = 0;
  int64_t seq = 0;        // equal times pop in the order they were pushed
  bool arrival = false;   // else an operation ends
  bool backward = false;  // arrival: a backward message (else forward)
  int stage = 0;
  int32_t micro_batch = 0;

  bool operator>(const Event& o) const {
    return time != o.time ? time > o.time : seq > o.seq;
  }
};

struct StageState {
  std::vector<ScheduledOp> ops;
  size_t next = 0;
  bool running = false;
  bool queued = false;  // waiting in its device's ready set
  double prev_done = 0;
  // Arrival time of each micro-batch's message from below / above; -1 until
  // it has arrived.
  std::vector<double> forward_arrival;
  std::vector<double> backward_arrival;
  double busy = 0;
  int64_t in_flight = 0;
  int64_t peak_in_flight = 0;
  int64_t backwards = 0;  // ended, for the all-reduce every k
  double allreduce = 0;   // seconds of busy
};

// One direction of one link: messages go one after another.
struct LinkState {
  double free_at = 0;
  double busy = 0;  // seconds spent sending
};

std::string Bandwidth(double bytes_per_second) {
  return bytes_per_second >= 1e9
             ? absl::StrCat(bytes_per_second / 1e9, " GB/s")
             : absl::StrCat(bytes_per_second / 1e6, " MB/s");
}

std::vector<int> DeviceMapping(const SimConfig& c, int* device_count) {
  const int stages = static_cast<int>(c.stages.size());
  if (!c.stage_devices.empty()) {
    int d = c.devices;
    if (d == 0) {
      d = *std::max_element(c.stage_devices.begin(), c.stage_devices.end()) + 1;
    }
    *device_count = d;
    return c.stage_devices;
  }
  const int d = c.devices == 0 ? stages : c.devices;
  *device_count = d;
  std::vector<int> map(stages);
  for (int j = 0; j < stages; ++j) {
    map[j] = static_cast<int>(static_cast<int64_t>(j) * d / stages);
  }
  return map;
}

}  // namespace

double ForwardGradientForwards(int j) { return 3.0 + 3.0 + 2.0 * j; }

bool BackwardsOnStoredGraphs(Schedule schedule, bool store_activations) {
  return schedule == Schedule::kDelayed ||
         (store_activations && SchedulesInGroups(schedule));
}

double SecondsAsRun(double stored, double rebuilt, Schedule schedule,
                    bool store_activations) {
  return BackwardsOnStoredGraphs(schedule, store_activations) && stored > 0
             ? stored
             : rebuilt;
}

std::string ScheduleName(Schedule schedule) {
  switch (schedule) {
    case Schedule::kBackprop:
      return "backprop";
    case Schedule::kGpipe:
      return "gpipe";
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kDelayed:
      return "delayed";
    case Schedule::kPetra:
      return "petra";
    case Schedule::kForwardGradient:
      return "forward_gradient";
    case Schedule::kEval:
      return "eval";
    case Schedule::kGradientCheck:
      return "gradient_check";
  }
  return "unknown";
}

const std::vector<Schedule>& AllSchedules() {
  static const std::vector<Schedule> all = {
      Schedule::kBackprop, Schedule::kGpipe, Schedule::kOneFOneB,
      Schedule::kDelayed,  Schedule::kPetra, Schedule::kForwardGradient};
  return all;
}

absl::StatusOr<Schedule> ParseSchedule(absl::string_view name) {
  std::vector<std::string> names;
  for (Schedule s : AllSchedules()) {
    if (ScheduleName(s) == name) return s;
    names.push_back(ScheduleName(s));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown schedule \"", name, "\": expected ", absl::StrJoin(names, "|")));
}

bool SchedulesInGroups(Schedule schedule) {
  return schedule == Schedule::kGpipe || schedule == Schedule::kOneFOneB;
}

int64_t DefaultGroup(int64_t stages, int64_t micro_batches) {
  return std::max<int64_t>(1, std::min(4 * stages, micro_batches));
}

namespace {

// What each stage's forward and backward cost on its device under
// `schedule` (our engine rebuilds or recomputes but where the graph is
// kept; forward gradients run j + 1 forwards and a next-to-free update).
void OperationCosts(const SimConfig& config, std::vector<double>* forward,
                    std::vector<double>* backward) {
  const int stages = static_cast<int>(config.stages.size());
  const bool fg = config.schedule == Schedule::kForwardGradient;
  forward->assign(stages, 0.0);
  backward->assign(stages, 0.0);
  for (int j = 0; j < stages; ++j) {
    const StageCost& s = config.stages[j];
    (*forward)[j] = SecondsAsRun(s.forward_stored_seconds, s.forward_seconds,
                                 config.schedule, config.store_activations);
    (*backward)[j] = SecondsAsRun(s.backward_stored_seconds, s.backward_seconds,
                                  config.schedule, config.store_activations);
    if (fg && j + 1 < stages) {
      (*forward)[j] *= ForwardGradientForwards(j);
      (*backward)[j] = 0;  // the update: a scaled add, next to nothing
    }
  }
}

// The ring all-reduce of each stage's gradients, once every k backwards,
// over `bandwidth` (config's, or the links' the copies cross).
std::vector<double> AllReduceCosts(const SimConfig& config, int devices,
                                   double* bandwidth) {
  const int stages = static_cast<int>(config.stages.size());
  const int replicas = config.replicas;
  *bandwidth = config.allreduce_bandwidth;
  if (*bandwidth <= 0) {
    *bandwidth = config.devices_per_host > 0 &&
                         static_cast<int64_t>(devices) * replicas >
                             config.devices_per_host
                     ? config.cross_host_bandwidth
                     : config.link_bandwidth;
  }
  std::vector<double> cost(stages, 0.0);
  if (replicas > 1) {
    for (int j = 0; j < stages; ++j) {
      const double bytes = 2.0 * (replicas - 1) / replicas * 4.0 *
                           static_cast<double>(config.stages[j].parameters);
      cost[j] = bytes / *bandwidth + 2.0 * (replicas - 1) * config.link_latency;
    }
  }
  return cost;
}

// Each link's bandwidth: config's per link, or by whether it crosses hosts.
std::vector<double> LinkBandwidths(const SimConfig& config,
                                   const std::vector<int>& device_of) {
  std::vector<double> bandwidth_of = config.link_bandwidths;
  if (bandwidth_of.empty()) {
    const int per_host = config.devices_per_host;
    for (int j = 0; j + 1 < static_cast<int>(config.stages.size()); ++j) {
      const bool across = per_host > 0 && device_of[j] / per_host !=
                                              device_of[j + 1] / per_host;
      bandwidth_of.push_back(across ? config.cross_host_bandwidth
                                    : config.link_bandwidth);
    }
  }
  return bandwidth_of;
}

// One replica's run: every stage's operations in its schedule's order on
// its device, one at a time per device, messages over the links.
struct EventLoop {
  EventLoop(const SimConfig& c, int64_t micro_batches, int64_t group,
            std::vector<int> devices_of_stages, int device_count)
      : config(c),
        stages(static_cast<int>(c.stages.size())),
        fg(c.schedule == Schedule::kForwardGradient),
        device_of(std::move(devices_of_stages)),
        st(stages),
        up(std::max(0, stages - 1)),
        down(std::max(0, stages - 1)),
        ready(device_count),
        device_busy(device_count, false),
        device_seconds(device_count, 0.0) {
    OperationCosts(c, &forward_cost, &backward_cost);
    allreduce_cost = AllReduceCosts(c, device_count, &allreduce_bandwidth);
    bandwidth_of = LinkBandwidths(c, device_of);
    for (int j = 0; j < stages; ++j) {
      st[j].ops =
          schedule::StageSchedule(c.schedule, j, stages, micro_batches, group)
              .Rest();
      if (j > 0) st[j].forward_arrival.assign(micro_batches, -1.0);
      if (j < stages - 1) st[j].backward_arrival.assign(micro_batches, -1.0);
    }
    leaving.reserve(micro_batches);
  }

  // Stage j's next operation, once its input is there, joins its device's
  // ready set.
  void TryReady(int j) {
    StageState& s = st[j];
    if (s.running || s.queued || s.next >= s.ops.size()) return;
    const ScheduledOp op = s.ops[s.next];
    double arrival = 0;  // the data and the loss are always at hand
    if (op.kind != OpKind::kBackward && j > 0) {
      arrival = s.forward_arrival[op.micro_batch];
    } else if (op.kind == OpKind::kBackward && j < stages - 1) {
      arrival = s.backward_arrival[op.micro_batch];
    }
    if (arrival < 0) return;
    ready[device_of[j]].insert({std::max(s.prev_done, arrival), j});
    s.queued = true;
    dirty.push_back(device_of[j]);
  }

  void Send(LinkState& link, double now, int64_t bytes, int to, bool backward,
            int32_t m) {
    // Link min(to, from) joins the two stages.
    const double bandwidth = bandwidth_of[backward ? to : to - 1];
    const double start = std::max(now, link.free_at);
    link.busy += static_cast<double>(bytes) / bandwidth;
    link.free_at = start + static_cast<double>(bytes) / bandwidth;
    events.push(
        {link.free_at + config.link_latency, seq++, true, backward, to, m});
  }

  // Starts the first ready operation of every idle device that changed.
  void Dispatch(double now) {
    for (size_t i = 0; i < dirty.size(); ++i) {
      const int d = dirty[i];
      if (device_busy[d] || ready[d].empty()) continue;
      const int j = ready[d].begin()->second;
      ready[d].erase(ready[d].begin());
      StageState& s = st[j];
      s.queued = false;
      s.running = true;
      device_busy[d] = true;
      const ScheduledOp op = s.ops[s.next];
      double seconds = 0;
      if (Forwards(op.kind)) seconds += forward_cost[j];
      if (Backwards(op.kind)) {
        seconds += backward_cost[j];
        // The step that ends every k-th backward waits for the copies.
        if (config.replicas > 1 && ++s.backwards % config.accumulation == 0) {
          seconds += allreduce_cost[j];
          s.allreduce += allreduce_cost[j];
        }
      }
      s.busy += seconds;
      device_seconds[d] += seconds;
      if (Forwards(op.kind)) {
        s.peak_in_flight = std::max(s.peak_in_flight, ++s.in_flight);
      }
      events.push({now + seconds, seq++, false, false, j, op.micro_batch});
    }
    dirty.clear();
  }

  // An operation of stage j ended at `now`: what it sends, and what next.
  void Ended(const Event& e, double now) {
    StageState& s = st[e.stage];
    const ScheduledOp op = s.ops[s.next++];
    s.running = false;
    s.prev_done = now;
    makespan = std::max(makespan, now);
    device_busy[device_of[e.stage]] = false;
    dirty.push_back(device_of[e.stage]);
    const int j = e.stage;
    if (op.kind == OpKind::kForward && j < stages - 1) {
      // Forward gradients: the activation and j + 1 tangents like it.
      Send(up[j], now, config.stages[j].output_bytes * (fg ? j + 2 : 1), j + 1,
           false, op.micro_batch);
    }
    if (Backwards(op.kind)) {
      --s.in_flight;
      if (j > 0) {
        // The rebuilt or buffered input goes down with its gradient;
        // forward gradients send j doubles.
        Send(down[j - 1], now, fg ? 8 * j : 2 * config.stages[j].input_bytes,
             j - 1, true, op.micro_batch);
      } else {
        leaving.push_back(now);
      }
    }
    TryReady(j);
  }

  void Run() {
    for (int j = 0; j < stages; ++j) TryReady(j);
    Dispatch(0);
    while (!events.empty()) {
      const double now = events.top().time;
      while (!events.empty() && events.top().time == now) {
        const Event e = events.top();
        events.pop();
        if (e.arrival) {
          StageState& s = st[e.stage];
          (e.backward ? s.backward_arrival : s.forward_arrival)[e.micro_batch] =
              now;
          TryReady(e.stage);
          continue;
        }
        Ended(e, now);
      }
      Dispatch(now);
    }
  }

  const SimConfig& config;
  const int stages;
  const bool fg;
  const std::vector<int> device_of;
  std::vector<double> forward_cost, backward_cost, allreduce_cost;
  double allreduce_bandwidth = 0;
  std::vector<double> bandwidth_of;
  std::vector<StageState> st;
  std::vector<LinkState> up, down;
  // Per device: ready operations by (ready time, stage).
  std::vector<std::set<std::pair<double, int>>> ready;
  std::vector<bool> device_busy;
  std::vector<double> device_seconds;
  std::vector<int> dirty;  // devices whose state changed at this instant
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t seq = 0;
  std::vector<double> leaving;  // stage 0's backward ends
  double makespan = 0;
};

// The rate over the middle half of the micro-batches, in whole flush
// groups so that the bubbles count once per group.
double SteadyRate(const EventLoop& run, int64_t micro_batches, int64_t unit,
                  double overall) {
  std::vector<double> leaving = run.leaving;
  std::sort(leaving.begin(), leaving.end());
  const int64_t lo = (micro_batches + 3) / 4;
  const int64_t hi = 3 * micro_batches / 4;
  const int64_t lo_done = (lo + unit - 1) / unit * unit;
  const int64_t hi_done = hi / unit * unit;
  if (hi_done <= lo_done) return overall;
  const double t0 = lo_done == 0 ? 0.0 : leaving[lo_done - 1];
  const double t1 = leaving[hi_done - 1];
  if (t1 <= t0) return overall;
  return static_cast<double>(hi_done - lo_done) * run.config.replicas *
         run.config.micro_batch_size / (t1 - t0);
}

// Each stage's time and what it holds at its most.
void AddStageResults(const EventLoop& run, SimResult* r) {
  const Schedule schedule = run.config.schedule;
  const bool keeps_nothing_reversible =
      schedule == Schedule::kPetra || schedule == Schedule::kBackprop ||
      (SchedulesInGroups(schedule) && !run.config.store_activations);
  const bool keeps_graphs =
      run.config.store_activations && SchedulesInGroups(schedule);
  for (int j = 0; j < run.stages; ++j) {
    const StageCost& c = run.config.stages[j];
    StageResult s;
    s.device = run.device_of[j];
    s.busy_seconds = run.st[j].busy;
    s.utilization = run.st[j].busy / run.makespan;
    s.peak_in_flight = run.st[j].peak_in_flight;
    if (keeps_graphs && c.activation_bytes > 0) {
      s.input_buffer_bytes = s.peak_in_flight * c.activation_bytes;
    } else if (!(c.reversible && keeps_nothing_reversible) && !run.fg) {
      s.input_buffer_bytes = s.peak_in_flight * c.input_bytes;
    }
    // Forward gradients keep each micro-batch's guess, parameter-sized,
    // where delayed gradients keep weights (the last stage guesses none).
    if (schedule == Schedule::kDelayed || (run.fg && j + 1 < run.stages)) {
      s.weight_stash_bytes = s.peak_in_flight * 4 * c.parameters;
    }
    s.parameter_bytes = 2 * 4 * c.parameters;
    s.allreduce_seconds = run.st[j].allreduce;
    s.total_bytes =
        s.input_buffer_bytes + s.weight_stash_bytes + s.parameter_bytes;
    r->total_bytes += s.total_bytes;
    r->stages.push_back(s);
  }
}

// The busiest device (by its larger part: compute or all-reduce), or a
// link direction busier still.
void FindBound(const EventLoop& run, SimResult* r) {
  const int devices = static_cast<int>(run.device_seconds.size());
  std::vector<double> device_allreduce(devices, 0.0);
  for (int j = 0; j < run.stages; ++j) {
    device_allreduce[run.device_of[j]] += run.st[j].allreduce;
  }
  const int busiest = static_cast<int>(
      std::max_element(run.device_seconds.begin(), run.device_seconds.end()) -
      run.device_seconds.begin());
  r->bound_seconds = run.device_seconds[busiest];
  int stage_of_busiest = 0;
  for (int j = 0; j < run.stages; ++j) {
    if (run.device_of[j] == busiest) stage_of_busiest = j;
  }
  const bool allreduce_bound =
      device_allreduce[busiest] > run.device_seconds[busiest] / 2;
  const std::string who =
      std::count(run.device_of.begin(), run.device_of.end(), busiest) > 1
          ? absl::StrCat("device ", busiest)
          : absl::StrCat("stage ", stage_of_busiest);
  r->bound = allreduce_bound ? absl::StrCat("the all-reduce, ", who, " at ",
                                            Bandwidth(run.allreduce_bandwidth))
                             : absl::StrCat("compute, ", who);
  for (int l = 0; l + 1 < run.stages; ++l) {
    for (const bool backward : {false, true}) {
      const LinkState& link = backward ? run.down[l] : run.up[l];
      if (link.busy > r->bound_seconds) {
        r->bound_seconds = link.busy;
        r->bound = backward ? absl::StrCat("link ", l + 1, " -> ", l, " at ",
                                           Bandwidth(run.bandwidth_of[l]))
                            : absl::StrCat("link ", l, " -> ", l + 1, " at ",
                                           Bandwidth(run.bandwidth_of[l]));
      }
    }
  }
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const SimConfig& config) {
  if (absl::Status s = ValidateSimConfig(config); !s.ok()) return s;
  const int stages = static_cast<int>(config.stages.size());
  const int replicas = config.replicas;
  // One replica's share: the copies run side by side on their own devices.
  const int64_t micro_batches = config.micro_batches / replicas;
  const Schedule schedule = config.schedule;
  const int64_t group = config.group > 0 ? std::min(config.group, micro_batches)
                                         : DefaultGroup(stages, micro_batches);
  int devices = 0;
  std::vector<int> device_of = DeviceMapping(config, &devices);

  EventLoop run(config, micro_batches, group, std::move(device_of), devices);
  run.Run();
  for (int j = 0; j < stages; ++j) {
    if (run.st[j].next != run.st[j].ops.size()) {
      return absl::InternalError(absl::StrCat(
          ScheduleName(schedule), ": stage ", j, " stopped after ",
          run.st[j].next, " of ", run.st[j].ops.size(), " operations"));
    }
  }
  const double makespan = run.makespan;
  if (!std::isfinite(makespan)) {
    return absl::InvalidArgumentError(
        "the run takes longer than a double can count: times too large");
  }
  if (makespan <= 0) {
    return absl::InvalidArgumentError(
        "the run takes no time: give some stage a forward or backward time, "
        "or the links a latency");
  }

  SimResult r;
  r.schedule = schedule;
  r.group = SchedulesInGroups(schedule) ? group : 0;
  r.devices = devices;
  r.replicas = replicas;
  r.makespan_seconds = makespan;
  const double samples =
      static_cast<double>(micro_batches) * replicas * config.micro_batch_size;
  r.samples_per_second = samples / makespan;
  r.steady_samples_per_second =
      SteadyRate(run, micro_batches, SchedulesInGroups(schedule) ? group : 1,
                 r.samples_per_second);
  double utilization = 0;
  for (int d = 0; d < devices; ++d) {
    utilization += run.device_seconds[d] / makespan;
  }
  r.mean_device_utilization = utilization / devices;
  AddStageResults(run, &r);
  FindBound(run, &r);
  return r;
}

}  // namespace petra::sim

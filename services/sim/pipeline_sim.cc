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

// Bounds that keep every byte count and array within int64 and memory:
// J x M operations of 12 bytes, bytes x micro-batches summed over stages.
constexpr int64_t kMaxStageMicroBatches = int64_t{1} << 22;
constexpr int64_t kMaxMessageBytes = int64_t{1} << 40;
constexpr int64_t kMaxParameters = int64_t{1} << 32;

bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }

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

absl::Status ValidateSimConfig(const SimConfig& c) {
  const int64_t stages = static_cast<int64_t>(c.stages.size());
  if (stages < 1) {
    return absl::InvalidArgumentError("the pipeline needs at least one stage");
  }
  for (int64_t j = 0; j < stages; ++j) {
    const StageCost& s = c.stages[j];
    const std::pair<const char*, double> times[] = {
        {"forward_seconds", s.forward_seconds},
        {"backward_seconds", s.backward_seconds},
        {"backward_stored_seconds", s.backward_stored_seconds},
        {"forward_stored_seconds", s.forward_stored_seconds}};
    for (const auto& [name, value] : times) {
      if (!FiniteNonNegative(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", j, ": ", name, " = ", value,
                         ": must be a finite number >= 0"));
      }
    }
    const std::pair<const char*, int64_t> bytes[] = {
        {"input_bytes", s.input_bytes},
        {"output_bytes", s.output_bytes},
        {"activation_bytes", s.activation_bytes}};
    for (const auto& [name, value] : bytes) {
      if (value < 0 || value > kMaxMessageBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", j, ": ", name, " = ", value,
                         ": must be in [0, ", kMaxMessageBytes, "]"));
      }
    }
    if (s.parameters < 0 || s.parameters > kMaxParameters) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", j, ": parameters = ", s.parameters,
                       ": must be in [0, ", kMaxParameters, "]"));
    }
  }
  if (c.micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batches = ", c.micro_batches, ": must be at least 1"));
  }
  if (c.micro_batches > kMaxStageMicroBatches / stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stages x micro-batches = ", stages, " x ", c.micro_batches,
        ": too large to simulate (at most ", kMaxStageMicroBatches, ")"));
  }
  if (c.micro_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch size = ", c.micro_batch_size, ": must be at least 1"));
  }
  if (c.group < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group = ", c.group, ": must be at least 1 (0: default)"));
  }
  if (c.devices < 0 || c.devices > stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices = ", c.devices, ": must be in [1, ", stages,
                     "] (the stage count; 0: one per stage)"));
  }
  if (!c.stage_devices.empty()) {
    if (static_cast<int64_t>(c.stage_devices.size()) != stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage devices: ", c.stage_devices.size(), " entries for ", stages,
          " stages: give one device per stage"));
    }
    for (int64_t j = 0; j < stages; ++j) {
      const int d = c.stage_devices[j];
      const int64_t limit = c.devices > 0 ? c.devices : stages;
      if (d < 0 || d >= limit) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage devices: stage ", j, " on device ", d,
                         ": must be in [0, ", limit, ")"));
      }
    }
  }
  if (std::isnan(c.link_bandwidth) || c.link_bandwidth <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link bandwidth = ", c.link_bandwidth, " bytes/s: must be > 0"));
  }
  if (!c.link_bandwidths.empty() &&
      static_cast<int64_t>(c.link_bandwidths.size()) != stages - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link bandwidths: ", c.link_bandwidths.size(), " entries for ",
        stages - 1, " links between ", stages, " stages: give one per link"));
  }
  for (size_t l = 0; l < c.link_bandwidths.size(); ++l) {
    if (std::isnan(c.link_bandwidths[l]) || c.link_bandwidths[l] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("link ", l, " bandwidth = ", c.link_bandwidths[l],
                       " bytes/s: must be > 0"));
    }
  }
  if (c.devices_per_host < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices per host = ", c.devices_per_host,
                     ": must be >= 1 (0: one host)"));
  }
  if (c.devices_per_host > 0 &&
      (std::isnan(c.cross_host_bandwidth) || c.cross_host_bandwidth <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cross-host bandwidth = ", c.cross_host_bandwidth,
                     " bytes/s: must be > 0"));
  }
  if (!FiniteNonNegative(c.link_latency)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link latency = ", c.link_latency, " s: must be a finite number >= 0"));
  }
  if (c.replicas < 1 || c.replicas > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas = ", c.replicas, ": must be in [1, 2^20]"));
  }
  if (c.micro_batches < c.replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.micro_batches, " micro-batches for ", c.replicas,
                     " replicas: give each replica at least one"));
  }
  if (c.accumulation < 1 || c.accumulation > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulation = ", c.accumulation, ": must be in [1, 2^30]"));
  }
  if (!FiniteNonNegative(c.allreduce_bandwidth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce bandwidth = ", c.allreduce_bandwidth,
                     " bytes/s: must be a finite number >= 0 (0: the links')"));
  }
  return absl::OkStatus();
}

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
  const std::vector<int> device_of = DeviceMapping(config, &devices);

  // Our engine rebuilds or recomputes but where the graph is kept.
  const bool stored =
      BackwardsOnStoredGraphs(schedule, config.store_activations);
  std::vector<double> forward_cost(stages), backward_cost(stages);
  const bool fg = schedule == Schedule::kForwardGradient;
  for (int j = 0; j < stages; ++j) {
    const StageCost& s = config.stages[j];
    forward_cost[j] = stored && s.forward_stored_seconds > 0
                          ? s.forward_stored_seconds
                          : s.forward_seconds;
    backward_cost[j] = stored && s.backward_stored_seconds > 0
                           ? s.backward_stored_seconds
                           : s.backward_seconds;
    if (fg && j + 1 < stages) {
      forward_cost[j] *= ForwardGradientForwards(j);
      backward_cost[j] = 0;  // the update: a scaled add, next to nothing
    }
  }

  // The ring all-reduce of each stage's gradients, once every k backwards.
  std::vector<double> allreduce_cost(stages, 0.0);
  double allreduce_bandwidth = config.allreduce_bandwidth;
  if (allreduce_bandwidth <= 0) {
    allreduce_bandwidth = config.devices_per_host > 0 &&
                                  static_cast<int64_t>(devices) * replicas >
                                      config.devices_per_host
                              ? config.cross_host_bandwidth
                              : config.link_bandwidth;
  }
  if (replicas > 1) {
    for (int j = 0; j < stages; ++j) {
      const double bytes = 2.0 * (replicas - 1) / replicas * 4.0 *
                           static_cast<double>(config.stages[j].parameters);
      allreduce_cost[j] = bytes / allreduce_bandwidth +
                          2.0 * (replicas - 1) * config.link_latency;
    }
  }

  std::vector<StageState> st(stages);
  for (int j = 0; j < stages; ++j) {
    st[j].ops =
        schedule::StageSchedule(schedule, j, stages, micro_batches, group)
            .Rest();
    if (j > 0) st[j].forward_arrival.assign(micro_batches, -1.0);
    if (j < stages - 1) st[j].backward_arrival.assign(micro_batches, -1.0);
  }
  std::vector<LinkState> up(std::max(0, stages - 1)),
      down(std::max(0, stages - 1));
  // Per device: ready operations by (ready time, stage).
  std::vector<std::set<std::pair<double, int>>> ready(devices);
  std::vector<bool> device_busy(devices, false);
  std::vector<double> device_seconds(devices, 0.0);
  std::vector<int> dirty;  // devices whose state changed at this instant
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t seq = 0;
  std::vector<double> leaving;  // stage 0's backward ends
  leaving.reserve(micro_batches);
  double makespan = 0;

  auto try_ready = [&](int j) {
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
  };

  std::vector<double> bandwidth_of = config.link_bandwidths;
  if (bandwidth_of.empty()) {
    const int per_host = config.devices_per_host;
    for (int j = 0; j + 1 < stages; ++j) {
      const bool across = per_host > 0 && device_of[j] / per_host !=
                                              device_of[j + 1] / per_host;
      bandwidth_of.push_back(across ? config.cross_host_bandwidth
                                    : config.link_bandwidth);
    }
  }
  auto send = [&](LinkState& link, double now, int64_t bytes, int to,
                  bool backward, int32_t m) {
    // Link min(to, from) joins the two stages.
    const double bandwidth = bandwidth_of[backward ? to : to - 1];
    const double start = std::max(now, link.free_at);
    link.busy += static_cast<double>(bytes) / bandwidth;
    link.free_at = start + static_cast<double>(bytes) / bandwidth;
    events.push(
        {link.free_at + config.link_latency, seq++, true, backward, to, m});
  };

  auto dispatch = [&](double now) {
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
        if (replicas > 1 && ++s.backwards % config.accumulation == 0) {
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
  };

  for (int j = 0; j < stages; ++j) try_ready(j);
  dispatch(0);
  while (!events.empty()) {
    const double now = events.top().time;
    while (!events.empty() && events.top().time == now) {
      const Event e = events.top();
      events.pop();
      StageState& s = st[e.stage];
      if (e.arrival) {
        (e.backward ? s.backward_arrival : s.forward_arrival)[e.micro_batch] =
            now;
        try_ready(e.stage);
        continue;
      }
      const ScheduledOp op = s.ops[s.next++];
      s.running = false;
      s.prev_done = now;
      makespan = std::max(makespan, now);
      device_busy[device_of[e.stage]] = false;
      dirty.push_back(device_of[e.stage]);
      const int j = e.stage;
      if (op.kind == OpKind::kForward && j < stages - 1) {
        // Forward gradients: the activation and j + 1 tangents like it.
        send(up[j], now, config.stages[j].output_bytes * (fg ? j + 2 : 1),
             j + 1, false, op.micro_batch);
      }
      if (Backwards(op.kind)) {
        --s.in_flight;
        if (j > 0) {
          // The rebuilt or buffered input goes down with its gradient;
          // forward gradients send j doubles.
          send(down[j - 1], now, fg ? 8 * j : 2 * config.stages[j].input_bytes,
               j - 1, true, op.micro_batch);
        } else {
          leaving.push_back(now);
        }
      }
      try_ready(j);
    }
    dispatch(now);
  }

  for (int j = 0; j < stages; ++j) {
    if (st[j].next != st[j].ops.size()) {
      return absl::InternalError(
          absl::StrCat(ScheduleName(schedule), ": stage ", j, " stopped after ",
                       st[j].next, " of ", st[j].ops.size(), " operations"));
    }
  }
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

  // Middle half, in whole flush groups so the bubbles count once per group.
  std::sort(leaving.begin(), leaving.end());
  const int64_t unit = SchedulesInGroups(schedule) ? group : 1;
  const int64_t lo = (micro_batches + 3) / 4;
  const int64_t hi = 3 * micro_batches / 4;
  const int64_t lo_done = (lo + unit - 1) / unit * unit;
  const int64_t hi_done = hi / unit * unit;
  r.steady_samples_per_second = r.samples_per_second;
  if (hi_done > lo_done) {
    const double t0 = lo_done == 0 ? 0.0 : leaving[lo_done - 1];
    const double t1 = leaving[hi_done - 1];
    if (t1 > t0) {
      r.steady_samples_per_second = static_cast<double>(hi_done - lo_done) *
                                    replicas * config.micro_batch_size /
                                    (t1 - t0);
    }
  }

  double utilization = 0;
  for (int d = 0; d < devices; ++d) utilization += device_seconds[d] / makespan;
  r.mean_device_utilization = utilization / devices;

  const bool keeps_nothing_reversible =
      schedule == Schedule::kPetra || schedule == Schedule::kBackprop ||
      (SchedulesInGroups(schedule) && !config.store_activations);
  const bool keeps_graphs =
      config.store_activations && SchedulesInGroups(schedule);
  for (int j = 0; j < stages; ++j) {
    const StageCost& c = config.stages[j];
    StageResult s;
    s.device = device_of[j];
    s.busy_seconds = st[j].busy;
    s.utilization = st[j].busy / makespan;
    s.peak_in_flight = st[j].peak_in_flight;
    if (keeps_graphs && c.activation_bytes > 0) {
      s.input_buffer_bytes = s.peak_in_flight * c.activation_bytes;
    } else if (!(c.reversible && keeps_nothing_reversible) && !fg) {
      s.input_buffer_bytes = s.peak_in_flight * c.input_bytes;
    }
    // Forward gradients keep each micro-batch's guess, parameter-sized,
    // where delayed gradients keep weights (the last stage guesses none).
    if (schedule == Schedule::kDelayed || (fg && j + 1 < stages)) {
      s.weight_stash_bytes = s.peak_in_flight * 4 * c.parameters;
    }
    s.parameter_bytes = 2 * 4 * c.parameters;
    s.allreduce_seconds = st[j].allreduce;
    s.total_bytes =
        s.input_buffer_bytes + s.weight_stash_bytes + s.parameter_bytes;
    r.total_bytes += s.total_bytes;
    r.stages.push_back(s);
  }

  // The busiest device (by its larger part: compute or all-reduce), or a
  // link direction busier still.
  std::vector<double> device_allreduce(devices, 0.0);
  for (int j = 0; j < stages; ++j)
    device_allreduce[device_of[j]] += st[j].allreduce;
  const int busiest = static_cast<int>(
      std::max_element(device_seconds.begin(), device_seconds.end()) -
      device_seconds.begin());
  r.bound_seconds = device_seconds[busiest];
  int stage_of_busiest = 0;
  for (int j = 0; j < stages; ++j) {
    if (device_of[j] == busiest) stage_of_busiest = j;
  }
  const bool allreduce_bound =
      device_allreduce[busiest] > device_seconds[busiest] / 2;
  const std::string who =
      std::count(device_of.begin(), device_of.end(), busiest) > 1
          ? absl::StrCat("device ", busiest)
          : absl::StrCat("stage ", stage_of_busiest);
  r.bound = allreduce_bound ? absl::StrCat("the all-reduce, ", who, " at ",
                                           Bandwidth(allreduce_bandwidth))
                            : absl::StrCat("compute, ", who);
  for (int l = 0; l + 1 < stages; ++l) {
    for (const bool backward : {false, true}) {
      const LinkState& link = backward ? down[l] : up[l];
      if (link.busy > r.bound_seconds) {
        r.bound_seconds = link.busy;
        r.bound = backward ? absl::StrCat("link ", l + 1, " -> ", l, " at ",
                                          Bandwidth(bandwidth_of[l]))
                           : absl::StrCat("link ", l, " -> ", l + 1, " at ",
                                          Bandwidth(bandwidth_of[l]));
      }
    }
  }
  return r;
}

}  // namespace petra::sim

// A discrete-event simulator of pipeline schedules: how long M micro-batches
// take through J stages on D devices joined by links, and what each stage
// keeps in memory, for backprop, GPipe, 1F1B, delayed gradients, PETRA and
// forward gradients.
// Answers "what would this fleet do" without running one (petra simulate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/schedule/pipeline_schedule.h"

namespace petra::sim {

// The schedules are the runtime's own (engine/pipeline_schedule.h): the
// simulator only follows their order and adds the timing.
using Schedule = schedule::ScheduleKind;

// Command-line names: backprop, gpipe, 1f1b, delayed, petra,
// forward_gradient.
std::string ScheduleName(Schedule schedule);
absl::StatusOr<Schedule> ParseSchedule(absl::string_view name);
const std::vector<Schedule>& AllSchedules();  // in the order above

// Whether the schedule flushes the pipeline every `group` micro-batches.
bool SchedulesInGroups(Schedule schedule);

// Whether a backward of `schedule` runs on a stored graph (delayed always,
// gpipe and 1f1b with store_activations): then it costs
// backward_stored_seconds (and its forward forward_stored_seconds) where
// that is known.
bool BackwardsOnStoredGraphs(Schedule schedule, bool store_activations);
// A stage's time as `schedule` runs it: the graph-kept one (`stored`)
// where the schedule keeps its graphs and the profile knows it (> 0), else
// the rebuilt one. The simulator and `petra simulate`'s table both read it.
double SecondsAsRun(double stored, double rebuilt, Schedule schedule,
                    bool store_activations);

// What one micro-batch costs on one stage.
struct StageCost {
  double forward_seconds = 0;          // last stage: forward and loss
  double backward_seconds = 0;         // with rebuild (reversible) or recompute
  double backward_stored_seconds = 0;  // graph kept; 0 = unknown
  double forward_stored_seconds = 0;   // keeping its graph; 0 = unknown
  int64_t input_bytes = 0;             // one micro-batch's input message
  int64_t output_bytes = 0;            // one micro-batch's output message
  int64_t parameters = 0;
  bool reversible = false;
  // What one micro-batch's stored graph keeps (its activations and input);
  // 0 = unknown (then its input alone is counted).
  int64_t activation_bytes = 0;
};

struct SimConfig {
  std::vector<StageCost> stages;
  Schedule schedule = Schedule::kPetra;
  int64_t micro_batches = 256;
  int64_t micro_batch_size = 64;  // samples, for samples/s only
  // Micro-batches per flush for gpipe and 1f1b; 0 = DefaultGroup.
  int64_t group = 0;
  // gpipe and 1f1b as `petra train --mode pipeline` runs them without
  // --recompute: each forward's graph kept until its backward
  // (activation_bytes each), the backward at backward_stored_seconds when
  // known. Otherwise they recompute, and a reversible stage rebuilds its
  // input (keeps nothing), as --recompute does.
  bool store_activations = false;
  // Number of devices; 0 = one per stage. Stage j runs on device
  // floor(j * devices / stages) unless stage_devices is given.
  int devices = 0;
  // Explicit device of each stage (one entry per stage); overrides the
  // contiguous mapping. Device ids must be below `devices` when both are
  // given, else the device count is the largest id + 1.
  std::vector<int> stage_devices;
  // Each direction of each link between neighbours: bytes per second (may
  // be +infinity) and seconds from the end of a transfer to its arrival.
  double link_bandwidth = 1e9;
  double link_latency = 1e-4;
  // Each link's own bandwidth, link j joining stages j and j + 1 (one entry
  // per link), for fleets whose links differ (inside a host, across hosts);
  // empty: link_bandwidth everywhere.
  std::vector<double> link_bandwidths;
  // Devices per host (0: all on one host). Without link_bandwidths, a link
  // between stages whose devices are on different hosts (device /
  // devices_per_host) has cross_host_bandwidth, the others link_bandwidth.
  int devices_per_host = 0;
  double cross_host_bandwidth = 0;
  // Data-parallel replicas (JobSpec.replicas): R copies of the pipeline,
  // each on devices of its own (`devices` and `stage_devices` describe one
  // copy; copy r's device d is device r D + d of the fleet), each running
  // micro_batches / R of the micro-batches. Every `accumulation` backwards
  // a stage all-reduces its float32 gradients with its copies on its own
  // device before its next operation: a ring, 2 (R - 1) / R x 4 x
  // parameters bytes each way at allreduce_bandwidth, plus 2 (R - 1)
  // latencies. allreduce_bandwidth 0: cross_host_bandwidth when the R
  // copies span more than one host (devices_per_host), else
  // link_bandwidth.
  int replicas = 1;
  int64_t accumulation = 1;
  double allreduce_bandwidth = 0;
};

// A forward-gradient forward of stage j (not the last), in plain forwards:
// the local loss's forward and backward (about 3) and the tangents'
// pushes (forward_gradient_stage.h: about 3 for the first, 2 for each of
// the j further ones). The local guess's cost, the default; its update
// costs next to nothing.
double ForwardGradientForwards(int j);

// Micro-batches per flush when none is asked for: 4 per stage (GPipe's
// advice for a small bubble), at most the micro-batch count.
int64_t DefaultGroup(int64_t stages, int64_t micro_batches);

struct StageResult {
  int device = 0;
  double busy_seconds = 0;
  double utilization = 0;  // busy / makespan
  // Most micro-batches forwarded and not yet backwarded at once.
  int64_t peak_in_flight = 0;
  // What the micro-batches in flight keep, at their most: their inputs
  // (input_bytes each), or their stored graphs (activation_bytes each,
  // store_activations); 0 for a reversible stage that rebuilds (petra,
  // backprop, and gpipe and 1f1b recomputing).
  int64_t input_buffer_bytes = 0;
  // delayed, and forward_gradient's guesses (all stages but the last): peak
  // in flight x 4 bytes x parameters.
  int64_t weight_stash_bytes = 0;
  // float32 weights and momentum: 2 x 4 bytes x parameters.
  int64_t parameter_bytes = 0;
  int64_t total_bytes = 0;
  // With replicas: the part of busy_seconds spent in all-reduces.
  double allreduce_seconds = 0;
};

struct SimResult {
  Schedule schedule = Schedule::kPetra;
  int64_t group = 0;  // micro-batches per flush; 0 when the schedule has none
  int devices = 0;    // of one replica
  int replicas = 1;   // devices x replicas in all
  double makespan_seconds = 0;
  double samples_per_second = 0;  // M x S / makespan, over every replica
  // Over the middle half of the micro-batches leaving stage 0's backward
  // (whole groups for flushing schedules): the rate a long run settles at.
  double steady_samples_per_second = 0;
  double mean_device_utilization = 0;  // device busy / makespan, averaged
  int64_t total_bytes = 0;             // summed over stages (one replica)
  // What binds the run: the busiest device or link direction, named
  // ("compute, stage 2", "the all-reduce, stage 0", "link 1 -> 2 at
  // 1 GB/s"), and the seconds it was busy (the makespan's floor).
  std::string bound;
  double bound_seconds = 0;
  std::vector<StageResult> stages;  // one replica's (every copy the same)
};

// INVALID_ARGUMENT naming the problem for an empty pipeline, negative or
// non-finite times, negative bytes, a non-positive bandwidth, M < 1, a
// device mapping out of range, or a run too large to simulate.
absl::Status ValidateSimConfig(const SimConfig& config);

// Event-driven: O(ops log ops) for J stages and M micro-batches.
absl::StatusOr<SimResult> Simulate(const SimConfig& config);

}  // namespace petra::sim

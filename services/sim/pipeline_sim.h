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
#include "services/engine/pipeline_schedule.h"

namespace petra::sim {

// The schedules are the runtime's own (engine/pipeline_schedule.h): the
// simulator only follows their order and adds the timing.
using Schedule = engine::ScheduleKind;

// Command-line names: backprop, gpipe, 1f1b, delayed, petra,
// forward_gradient.
std::string ScheduleName(Schedule schedule);
absl::StatusOr<Schedule> ParseSchedule(absl::string_view name);
const std::vector<Schedule>& AllSchedules();  // in the order above

// Whether the schedule flushes the pipeline every `group` micro-batches.
bool SchedulesInGroups(Schedule schedule);

// What one micro-batch costs on one stage.
struct StageCost {
  double forward_seconds = 0;          // last stage: forward and loss
  double backward_seconds = 0;         // with rebuild (reversible) or recompute
  double backward_stored_seconds = 0;  // graph kept; 0 = unknown
  int64_t input_bytes = 0;             // one micro-batch's input message
  int64_t output_bytes = 0;            // one micro-batch's output message
  int64_t parameters = 0;
  bool reversible = false;
};

struct SimConfig {
  std::vector<StageCost> stages;
  Schedule schedule = Schedule::kPetra;
  int64_t micro_batches = 256;
  int64_t micro_batch_size = 64;  // samples, for samples/s only
  // Micro-batches per flush for gpipe and 1f1b; 0 = DefaultGroup.
  int64_t group = 0;
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
};

// Micro-batches per flush when none is asked for: 4 per stage (GPipe's
// advice for a small bubble), at most the micro-batch count.
int64_t DefaultGroup(int64_t stages, int64_t micro_batches);

struct StageResult {
  int device = 0;
  double busy_seconds = 0;
  double utilization = 0;  // busy / makespan
  // Most micro-batches forwarded and not yet backwarded at once.
  int64_t peak_in_flight = 0;
  // Peak buffered inputs x input_bytes; 0 for a reversible stage under
  // petra and backprop.
  int64_t input_buffer_bytes = 0;
  // delayed, and forward_gradient's guesses (all stages but the last): peak
  // in flight x 4 bytes x parameters.
  int64_t weight_stash_bytes = 0;
  // float32 weights and momentum: 2 x 4 bytes x parameters.
  int64_t parameter_bytes = 0;
  int64_t total_bytes = 0;
};

struct SimResult {
  Schedule schedule = Schedule::kPetra;
  int64_t group = 0;  // micro-batches per flush; 0 when the schedule has none
  int devices = 0;
  double makespan_seconds = 0;
  double samples_per_second = 0;  // M x S / makespan
  // Over the middle half of the micro-batches leaving stage 0's backward
  // (whole groups for flushing schedules): the rate a long run settles at.
  double steady_samples_per_second = 0;
  double mean_device_utilization = 0;  // device busy / makespan, averaged
  int64_t total_bytes = 0;             // summed over stages
  std::vector<StageResult> stages;
};

// INVALID_ARGUMENT naming the problem for an empty pipeline, negative or
// non-finite times, negative bytes, a non-positive bandwidth, M < 1, a
// device mapping out of range, or a run too large to simulate.
absl::Status ValidateSimConfig(const SimConfig& config);

// Event-driven: O(ops log ops) for J stages and M micro-batches.
absl::StatusOr<SimResult> Simulate(const SimConfig& config);

}  // namespace petra::sim

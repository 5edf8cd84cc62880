// ValidateSimConfig (pipeline_sim.h): what the simulator refuses before it
// runs, each refusal naming the field and its bounds.
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/sim/pipeline_sim.h"

namespace petra::sim {
namespace {

// Bounds that keep every byte count and array within int64 and memory:
// J x M operations of 12 bytes, bytes x micro-batches summed over stages.
constexpr int64_t kMaxStageMicroBatches = int64_t{1} << 22;
constexpr int64_t kMaxMessageBytes = int64_t{1} << 40;
constexpr int64_t kMaxParameters = int64_t{1} << 32;

bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }

// Each stage's times, sizes and parameters.
absl::Status CheckStageCosts(const SimConfig& c) {
  const int64_t stages = static_cast<int64_t>(c.stages.size());
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
  return absl::OkStatus();
}

// Where the stages run and what links them.
absl::Status CheckDevicesAndLinks(const SimConfig& c) {
  const int64_t stages = static_cast<int64_t>(c.stages.size());
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
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSimConfig(const SimConfig& c) {
  const int64_t stages = static_cast<int64_t>(c.stages.size());
  if (stages < 1) {
    return absl::InvalidArgumentError("the pipeline needs at least one stage");
  }
  if (absl::Status s = CheckStageCosts(c); !s.ok()) return s;
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
  if (absl::Status s = CheckDevicesAndLinks(c); !s.ok()) return s;
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

}  // namespace petra::sim

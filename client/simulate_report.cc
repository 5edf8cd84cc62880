#include "client/simulate_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "services/sim/profile_io.h"

namespace petra::client {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The backward time the schedule runs (delayed keeps the graph when known).
double BackwardSeconds(const petra::v1::StageProfile& s,
                       sim::Schedule schedule) {
  return schedule == sim::Schedule::kDelayed && s.backward_stored_seconds() > 0
             ? s.backward_stored_seconds()
             : s.backward_seconds();
}

std::string BandwidthText(double bytes_per_second) {
  if (bytes_per_second >= 1e9) {
    return absl::StrFormat("%.3g GB/s", bytes_per_second / 1e9);
  }
  if (bytes_per_second >= 1e6) {
    return absl::StrFormat("%.3g MB/s", bytes_per_second / 1e6);
  }
  return absl::StrFormat("%.3g B/s", bytes_per_second);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

std::string SimulationText(const SimulationInputs& in,
                           const SimulationRuns& runs, bool per_stage) {
  const sim::SimConfig& c = in.config;
  const int stages = static_cast<int>(c.stages.size());
  const std::string hosts =
      c.devices_per_host > 0
          ? absl::StrFormat(
                " on hosts of %d, across hosts %s", c.devices_per_host,
                BandwidthText(c.cross_host_bandwidth))
          : std::string();
  std::string out = absl::StrFormat(
      "Stages: %d, from %s\n"
      "Devices: %d%s; links: %s%s, latency %g s, each direction\n"
      "Run: %d micro-batches of %d samples\n\n",
      stages, in.source, runs.backprop.devices,
      runs.backprop.devices == stages ? " (one per stage)" : "",
      BandwidthText(c.link_bandwidth), hosts, c.link_latency, c.micro_batches,
      c.micro_batch_size);
  absl::StrAppendFormat(&out, "%-16s %6s %12s %12s %9s %9s %6s %12s\n",
                        "schedule", "group", "samples/s", "steady smp/s",
                        "speed-up", "steady", "util", "memory MiB");
  for (const sim::SimResult& r : runs.runs) {
    absl::StrAppendFormat(
        &out, "%-16s %6s %12.1f %12.1f %8.2fx %8.2fx %5.1f%% %12.1f\n",
        sim::ScheduleName(r.schedule),
        r.group > 0 ? absl::StrCat(r.group) : "-", r.samples_per_second,
        r.steady_samples_per_second,
        Ratio(r.samples_per_second, runs.backprop.samples_per_second),
        Ratio(r.steady_samples_per_second,
              runs.backprop.steady_samples_per_second),
        100 * r.mean_device_utilization, r.total_bytes / kMiB);
  }
  absl::StrAppend(
      &out,
      "\nspeed-up: samples/s over backprop's; steady: the same over the middle "
      "half of the run;\nutil: mean device busy time / makespan; memory: "
      "input buffers, weight stashes,\nparameters and momentum, summed over "
      "stages (activations inside a stage not counted).\n");
  for (const sim::SimResult& r : runs.runs) {
    if (!per_stage) break;
    absl::StrAppendFormat(&out, "\n%s, per stage (makespan %.4g s)\n",
                          sim::ScheduleName(r.schedule), r.makespan_seconds);
    absl::StrAppendFormat(&out, "%5s %6s %9s %9s %6s %9s %10s %10s %11s %10s\n",
                          "stage", "device", "F ms", "B ms", "util",
                          "in flight", "input MiB", "stash MiB", "params+opt",
                          "total MiB");
    for (int j = 0; j < stages; ++j) {
      const sim::StageResult& s = r.stages[j];
      const petra::v1::StageProfile& p = in.profile.stages(j);
      absl::StrAppendFormat(
          &out, "%5d %6d %9.3f %9.3f %5.1f%% %9d %10.2f %10.2f %11.2f %10.2f\n",
          j, s.device, 1e3 * p.forward_seconds(),
          1e3 * BackwardSeconds(p, r.schedule), 100 * s.utilization,
          s.peak_in_flight, s.input_buffer_bytes / kMiB,
          s.weight_stash_bytes / kMiB, s.parameter_bytes / kMiB,
          s.total_bytes / kMiB);
    }
  }
  return out;
}

std::string SimulationJson(const SimulationInputs& in,
                           const SimulationRuns& runs) {
  const sim::SimConfig& c = in.config;
  std::string profile = sim::ProfileToJson(in.profile);
  while (!profile.empty() && profile.back() == '\n') profile.pop_back();
  std::string out = absl::StrFormat(
      "{\n  \"inputs\": {\"source\": %s, \"stages\": %d, \"devices\": %d, "
      "\"stage_devices\": [%s], \"link_bandwidth\": %.9g, "
      "\"devices_per_host\": %d, \"cross_host_bandwidth\": %.9g, "
      "\"link_latency\": %.9g, \"micro_batches\": %d, "
      "\"micro_batch_size\": %d},\n  \"profile\": %s,\n  \"schedules\": [",
      JsonString(in.source), c.stages.size(), runs.backprop.devices,
      absl::StrJoin(runs.backprop.stages, ", ",
                    [](std::string* o, const sim::StageResult& s) {
                      absl::StrAppend(o, s.device);
                    }),
      c.link_bandwidth, c.devices_per_host,
      c.devices_per_host > 0 ? c.cross_host_bandwidth : c.link_bandwidth,
      c.link_latency, c.micro_batches, c.micro_batch_size, profile);
  for (size_t i = 0; i < runs.runs.size(); ++i) {
    const sim::SimResult& r = runs.runs[i];
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"schedule\": \"%s\", \"group\": %d, "
        "\"makespan_seconds\": %.9g, \"samples_per_second\": %.9g, "
        "\"steady_samples_per_second\": %.9g, \"speedup\": %.9g, "
        "\"steady_speedup\": %.9g, \"mean_device_utilization\": %.9g, "
        "\"total_bytes\": %d,\n     \"stages\": [",
        i == 0 ? "" : ",", sim::ScheduleName(r.schedule), r.group,
        r.makespan_seconds, r.samples_per_second, r.steady_samples_per_second,
        Ratio(r.samples_per_second, runs.backprop.samples_per_second),
        Ratio(r.steady_samples_per_second,
              runs.backprop.steady_samples_per_second),
        r.mean_device_utilization, r.total_bytes);
    for (size_t j = 0; j < r.stages.size(); ++j) {
      const sim::StageResult& s = r.stages[j];
      const petra::v1::StageProfile& p = in.profile.stages(j);
      absl::StrAppendFormat(
          &out,
          "%s\n       {\"index\": %d, \"device\": %d, "
          "\"forward_seconds\": %.9g, \"backward_seconds\": %.9g, "
          "\"busy_seconds\": %.9g, \"utilization\": %.9g, "
          "\"peak_in_flight\": %d, \"input_buffer_bytes\": %d, "
          "\"weight_stash_bytes\": %d, \"parameter_bytes\": %d, "
          "\"total_bytes\": %d}",
          j == 0 ? "" : ",", j, s.device, p.forward_seconds(),
          BackwardSeconds(p, r.schedule), s.busy_seconds, s.utilization,
          s.peak_in_flight, s.input_buffer_bytes, s.weight_stash_bytes,
          s.parameter_bytes, s.total_bytes);
    }
    absl::StrAppend(&out, "]}");
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace petra::client

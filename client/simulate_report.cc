#include "client/simulate_report.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "services/sim/profile_io.h"

namespace petra::client {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

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
          ? absl::StrFormat(" on hosts of %d, across hosts %s",
                            c.devices_per_host,
                            BandwidthText(c.cross_host_bandwidth))
          : std::string();
  const int replicas = runs.backprop.replicas;
  const int devices = runs.backprop.devices;
  const std::string device_text =
      replicas > 1
          ? absl::StrFormat("%d (%d replicas x %d%s)", devices * replicas,
                            replicas, devices,
                            devices == stages ? ", one per stage" : "")
          : absl::StrCat(devices, devices == stages ? " (one per stage)" : "");
  std::string out = absl::StrFormat(
      "Stages: %d, from %s\n"
      "Devices: %s; links: %s%s, latency %g s, each direction\n",
      stages, in.source, device_text, BandwidthText(c.link_bandwidth), hosts,
      c.link_latency);
  if (!in.note.empty()) absl::StrAppend(&out, "Split: ", in.note, "\n");
  if (replicas > 1) {
    absl::StrAppendFormat(
        &out,
        "Replicas: a ring all-reduce of each stage's gradients every %d "
        "micro-batches of a replica%s\n",
        c.accumulation,
        c.allreduce_bandwidth > 0
            ? absl::StrCat(", at ", BandwidthText(c.allreduce_bandwidth))
            : "");
  }
  absl::StrAppendFormat(&out, "Run: %d micro-batches of %d samples\n\n",
                        c.micro_batches, c.micro_batch_size);
  absl::StrAppendFormat(&out, "%-16s %6s %12s %12s %9s %9s %6s %12s  %s\n",
                        "schedule", "group", "samples/s", "steady smp/s",
                        "speed-up", "steady", "util", "memory MiB", "bound by");
  for (const sim::SimResult& r : runs.runs) {
    absl::StrAppendFormat(
        &out, "%-16s %6s %12.1f %12.1f %8.2fx %8.2fx %5.1f%% %12.1f  %s\n",
        sim::ScheduleName(r.schedule),
        r.group > 0 ? absl::StrCat(r.group) : "-", r.samples_per_second,
        r.steady_samples_per_second,
        Ratio(r.samples_per_second, runs.backprop.samples_per_second),
        Ratio(r.steady_samples_per_second,
              runs.backprop.steady_samples_per_second),
        100 * r.mean_device_utilization, r.total_bytes / kMiB, r.bound);
  }
  absl::StrAppend(
      &out,
      "\nspeed-up: samples/s over backprop's (with as many replicas); steady: "
      "the same over\nthe middle half of the run; util: mean device busy time "
      "/ makespan; memory: input\nbuffers (stored graphs with "
      "--store-activations), weight stashes, parameters\nand momentum, summed "
      "over one replica's stages (activations inside a stage not\ncounted); "
      "bound by: the busiest device (its larger part, compute or all-reduce)"
      "\nor link direction, which sets the rate.\n");
  if (in.default_links && std::any_of(runs.runs.begin(), runs.runs.end(),
                                      [](const sim::SimResult& r) {
                                        return absl::StartsWith(r.bound,
                                                                "link");
                                      })) {
    absl::StrAppend(
        &out, "\nA link binds at --link-bandwidth's default, ",
        BandwidthText(in.config.link_bandwidth),
        ", not a rate you gave: give your links' (e.g. 4.5e11 for NVLink, "
        "5e10 for 400 Gb/s InfiniBand with --cross-host-bandwidth).\n");
  }
  for (const sim::SimResult& r : runs.runs) {
    if (!per_stage) break;
    absl::StrAppendFormat(&out, "\n%s, per stage (makespan %.4g s)\n",
                          sim::ScheduleName(r.schedule), r.makespan_seconds);
    absl::StrAppendFormat(
        &out, "%5s %6s %9s %9s %6s %9s %10s %10s %11s %10s %12s\n", "stage",
        "device", "F ms", "B ms", "util", "in flight", "input MiB", "stash MiB",
        "params+opt", "total MiB", "all-reduce s");
    for (int j = 0; j < stages; ++j) {
      const sim::StageResult& s = r.stages[j];
      const petra::v1::StageProfile& p = in.profile.stages(j);
      absl::StrAppendFormat(
          &out,
          "%5d %6d %9.3f %9.3f %5.1f%% %9d %10.2f %10.2f %11.2f %10.2f "
          "%12.4g\n",
          j, s.device,
          1e3 * sim::SecondsAsRun(p.forward_stored_seconds(),
                                  p.forward_seconds(), r.schedule,
                                  in.config.store_activations),
          1e3 * sim::SecondsAsRun(p.backward_stored_seconds(),
                                  p.backward_seconds(), r.schedule,
                                  in.config.store_activations),
          100 * s.utilization, s.peak_in_flight, s.input_buffer_bytes / kMiB,
          s.weight_stash_bytes / kMiB, s.parameter_bytes / kMiB,
          s.total_bytes / kMiB, s.allreduce_seconds);
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
      "\"micro_batch_size\": %d, \"replicas\": %d, \"accumulation\": %d, "
      "\"allreduce_bandwidth\": %.9g, \"note\": %s},\n  \"profile\": %s,\n"
      "  \"schedules\": [",
      JsonString(in.source), c.stages.size(), runs.backprop.devices,
      absl::StrJoin(runs.backprop.stages, ", ",
                    [](std::string* o, const sim::StageResult& s) {
                      absl::StrAppend(o, s.device);
                    }),
      c.link_bandwidth, c.devices_per_host,
      c.devices_per_host > 0 ? c.cross_host_bandwidth : c.link_bandwidth,
      c.link_latency, c.micro_batches, c.micro_batch_size,
      runs.backprop.replicas, c.accumulation, c.allreduce_bandwidth,
      JsonString(in.note), profile);
  for (size_t i = 0; i < runs.runs.size(); ++i) {
    const sim::SimResult& r = runs.runs[i];
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"schedule\": \"%s\", \"group\": %d, "
        "\"makespan_seconds\": %.9g, \"samples_per_second\": %.9g, "
        "\"steady_samples_per_second\": %.9g, \"speedup\": %.9g, "
        "\"steady_speedup\": %.9g, \"mean_device_utilization\": %.9g, "
        "\"total_bytes\": %d, \"replicas\": %d, \"bound\": %s, "
        "\"bound_seconds\": %.9g,\n     \"stages\": [",
        i == 0 ? "" : ",", sim::ScheduleName(r.schedule), r.group,
        r.makespan_seconds, r.samples_per_second, r.steady_samples_per_second,
        Ratio(r.samples_per_second, runs.backprop.samples_per_second),
        Ratio(r.steady_samples_per_second,
              runs.backprop.steady_samples_per_second),
        r.mean_device_utilization, r.total_bytes, r.replicas,
        JsonString(r.bound), r.bound_seconds);
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
          "\"total_bytes\": %d, \"allreduce_seconds\": %.9g}",
          j == 0 ? "" : ",", j, s.device,
          sim::SecondsAsRun(p.forward_stored_seconds(), p.forward_seconds(),
                            r.schedule, c.store_activations),
          sim::SecondsAsRun(p.backward_stored_seconds(), p.backward_seconds(),
                            r.schedule, c.store_activations),
          s.busy_seconds, s.utilization, s.peak_in_flight, s.input_buffer_bytes,
          s.weight_stash_bytes, s.parameter_bytes, s.total_bytes,
          s.allreduce_seconds);
    }
    absl::StrAppend(&out, "]}");
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace petra::client

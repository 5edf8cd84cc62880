// `petra simulate`: predicts the throughput and memory of each pipeline
// schedule for a profile, a model estimate or uniform stages, with the
// discrete-event simulator of services/sim (nothing is trained).
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/command_table.h"
#include "client/estimated_profile.h"
#include "client/model_flags.h"
#include "client/simulate_report.h"
#include "services/base/flag_set.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/job_spec_validation.h"
#include "services/sim/pipeline_sim.h"
#include "services/sim/profile_io.h"

namespace petra::client {
namespace {

// Flags only one way of giving the stage costs takes.
constexpr const char* kModelFlags[] = {"arch", "variant", "width", "stages",
                                       "device-flops-per-second"};
constexpr const char* kUniformFlags[] = {"forward-seconds",
                                         "backward-seconds",
                                         "backward-stored-seconds",
                                         "forward-stored-seconds",
                                         "message-bytes",
                                         "stage-parameters",
                                         "reversible"};

struct SimulateOptions {
  std::string profile;
  ModelFlags model;
  double flops_per_second = 0;
  uint64_t uniform_stages = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double backward_stored_seconds = 0;
  double forward_stored_seconds = 0;
  uint64_t message_bytes = 0;
  uint64_t stage_parameters = 0;
  bool reversible = true;
  uint64_t micro_batch = 64;
  std::string schedule = "all";
  uint64_t micro_batches = 256;
  uint64_t group = 0;
  uint64_t devices = 0;
  std::vector<int> stage_devices;
  double link_bandwidth = 1e9;
  uint64_t devices_per_host = 0;
  double cross_host_bandwidth = 0;
  double link_latency = 1e-4;
  uint64_t replicas = 1;
  uint64_t accumulation = 1;
  double allreduce_bandwidth = 0;
  bool store_activations = false;
  bool json = false;
  std::string per_stage = "auto";
};

// A setter for a number that must be finite and >= `min` (> when strict).
std::function<absl::Status(const std::string&)> StoreNumber(double* target,
                                                            double min,
                                                            bool strict) {
  return [=](const std::string& v) -> absl::Status {
    absl::StatusOr<double> d = base::ParseDoubleValue(v);
    if (!d.ok()) return d.status();
    if (strict ? *d <= min : *d < min) {
      return base::BadValue(
          v, absl::StrCat("a number ", strict ? ">" : ">=", " ", min));
    }
    *target = *d;
    return absl::OkStatus();
  };
}

// A setter for a positive integer.
std::function<absl::Status(const std::string&)> StorePositive(
    uint64_t* target) {
  return [=](const std::string& v) -> absl::Status {
    absl::StatusOr<uint64_t> n = base::ParseUnsignedValue<uint64_t>(v);
    if (!n.ok() || *n == 0) return base::BadValue(v, "an integer >= 1");
    *target = *n;
    return absl::OkStatus();
  };
}

absl::Status ParseStageDevices(const std::string& v, std::vector<int>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(v, ',')) {
    int d = 0;
    if (!absl::SimpleAtoi(part, &d) || d < 0) {
      return base::BadValue(v, "device numbers >= 0 separated by commas");
    }
    out->push_back(d);
  }
  return absl::OkStatus();
}

void AddFlags(base::FlagSet& flags, SimulateOptions* o) {
  flags.AddString("profile", &o->profile,
                  "stage costs from a Profile JSON file (petra profile)");
  AddModelFlags(flags, &o->model,
                "stage costs estimated from this network's FLOPs (needs "
                "--device-flops-per-second)");
  flags.AddCustom("device-flops-per-second", "NUMBER", "",
                  "with --arch (required): the device's sustained FLOP/s "
                  "for the estimate",
                  StoreNumber(&o->flops_per_second, 0, true));
  flags.AddCustom("uniform-stages", "N", "",
                  "N equal stages (needs --forward-seconds and "
                  "--backward-seconds)",
                  StorePositive(&o->uniform_stages));
  flags.AddCustom("forward-seconds", "NUMBER", "",
                  "with --uniform-stages: one forward of a micro-batch",
                  StoreNumber(&o->forward_seconds, 0, false));
  flags.AddCustom("backward-seconds", "NUMBER", "",
                  "with --uniform-stages: one backward with rebuild or "
                  "recompute",
                  StoreNumber(&o->backward_seconds, 0, false));
  flags.AddCustom("backward-stored-seconds", "NUMBER", "0 = unknown",
                  "with --uniform-stages: backward with the graph kept "
                  "(delayed uses it)",
                  StoreNumber(&o->backward_stored_seconds, 0, false));
  flags.AddCustom("forward-stored-seconds", "NUMBER", "0 = unknown",
                  "with --uniform-stages: forward that keeps its graph "
                  "(gpipe and 1f1b with --store-activations use it)",
                  StoreNumber(&o->forward_stored_seconds, 0, false));
  flags.AddUint("message-bytes", &o->message_bytes,
                "with --uniform-stages: bytes of each stage's input and "
                "output message");
  flags.AddUint("stage-parameters", &o->stage_parameters,
                "with --uniform-stages: parameters per stage, for memory");
  flags.AddBool("reversible", &o->reversible,
                "with --uniform-stages: stages are reversible (PETRA keeps no "
                "input buffer)");
  flags.AddCustom("micro-batch", "N", "64",
                  "samples per micro-batch (with --arch or --uniform-stages; "
                  "a profile has its own)",
                  StorePositive(&o->micro_batch));
  flags.AddString("schedule", &o->schedule,
                  "backprop|gpipe|1f1b|delayed|petra|forward_gradient|all");
  flags.AddCustom("micro-batches", "N", "256", "micro-batches to simulate",
                  StorePositive(&o->micro_batches));
  flags.AddCustom("group", "N", "4 x stages, at most --micro-batches",
                  "micro-batches per flush for gpipe and 1f1b",
                  StorePositive(&o->group));
  flags.AddBool("store-activations", &o->store_activations,
                "gpipe and 1f1b keep each forward's graph until its backward "
                "(its activations in memory, the backward without a "
                "recompute), as `petra train --mode pipeline` does without "
                "--recompute; costs from a measured profile. Without it they "
                "recompute, as with --recompute");
  flags.AddCustom("devices", "N", "one per stage (of every replica)",
                  "devices in all; each replica's stage j runs on its device "
                  "floor(j * N / (R stages)). More devices than stages, "
                  "without --replicas: R = N / stages replicas",
                  StorePositive(&o->devices));
  flags.AddCustom("replicas", "R", "1, or --devices / stages",
                  "data-parallel copies of the pipeline, each on devices of "
                  "its own, averaging their gradients every "
                  "--accumulation-steps micro-batches (a ring all-reduce)",
                  StorePositive(&o->replicas));
  flags.AddCustom("accumulation-steps", "K", "1",
                  "micro-batches of each replica per optimizer step (one "
                  "all-reduce each)",
                  StorePositive(&o->accumulation));
  flags.AddCustom("allreduce-bandwidth", "BYTES_PER_S",
                  "--cross-host-bandwidth when the replicas span hosts, "
                  "else --link-bandwidth",
                  "each direction of each device's all-reduce link",
                  StoreNumber(&o->allreduce_bandwidth, 0, true));
  flags.AddCustom("stage-devices", "D0,D1,...", "",
                  "the device of each stage, e.g. 0,0,1,1",
                  [o](const std::string& v) {
                    return ParseStageDevices(v, &o->stage_devices);
                  });
  flags.AddCustom("link-bandwidth", "BYTES_PER_S", "1e+09",
                  "each direction of each link between neighbouring stages",
                  StoreNumber(&o->link_bandwidth, 0, true));
  flags.AddCustom("devices-per-host", "N", "all on one host",
                  "devices per host (device d is on host d / N): links "
                  "between hosts have --cross-host-bandwidth",
                  StorePositive(&o->devices_per_host));
  flags.AddCustom("cross-host-bandwidth", "BYTES_PER_S", "--link-bandwidth",
                  "with --devices-per-host: each direction of a link between "
                  "stages on different hosts",
                  StoreNumber(&o->cross_host_bandwidth, 0, true));
  flags.AddCustom("link-latency", "SECONDS", "0.0001",
                  "from the end of a transfer to its arrival",
                  StoreNumber(&o->link_latency, 0, false));
  flags.AddBool("json", &o->json, "print everything as one JSON object");
  flags.AddString("per-stage", &o->per_stage,
                  "yes, no, or auto: a table per schedule, stage by stage "
                  "(auto: only when one schedule is asked for)");
}

// Exit code and message of a failed step.
struct Failure {
  int code;
  std::string message;
};

// --profile FILE: a measured profile.
absl::Status FromProfile(const SimulateOptions& o, SimulationInputs* in,
                         Failure* failure) {
  absl::StatusOr<petra::v1::Profile> p = sim::ReadProfileFile(o.profile);
  if (!p.ok()) {
    failure->code = 1;
    return p.status();
  }
  if (absl::Status s = sim::ValidateProfile(*p); !s.ok()) {
    failure->code = 1;
    return absl::InvalidArgumentError(
        absl::StrCat(o.profile, ": ", s.message()));
  }
  in->profile = *p;
  in->source = absl::StrFormat(
      "profile %s (%s%s%s, micro-batch %d%s)", o.profile,
      p->source().empty() ? "source not given" : p->source(),
      p->architecture().empty() ? "" : ", ", p->architecture(),
      p->micro_batch_size(),
      p->device().empty() ? "" : absl::StrCat(", device ", p->device()));
  return absl::OkStatus();
}

// --arch: a FLOPs estimate of the network on a device of a given rate.
absl::Status FromModel(const base::FlagSet& flags, const SimulateOptions& o,
                       SimulationInputs* in, Failure* failure) {
  if (!flags.WasSet("device-flops-per-second")) {
    return absl::InvalidArgumentError(
        "--arch needs --device-flops-per-second (the device's sustained "
        "FLOP/s, e.g. 1e13)");
  }
  absl::StatusOr<petra::v1::JobSpec> spec = ModelSpecFromFlags(o.model);
  if (!spec.ok()) return spec.status();
  spec->mutable_training()->set_micro_batch_size(
      static_cast<uint32_t>(std::min<uint64_t>(o.micro_batch, 1u << 30)));
  absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(*spec);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<PartitionedModel> model = BuildPartitionedModel(*resolved);
  if (!model.ok()) {
    failure->code = 1;
    return model.status();
  }
  in->profile =
      EstimateProfile(*resolved, *model, static_cast<int64_t>(o.micro_batch),
                      o.flops_per_second);
  in->source = absl::StrFormat(
      "an estimate: %s (%s, %s), FLOPs / %g FLOP/s, backward 3 x forward",
      in->profile.architecture(), in->profile.variant(),
      catalog::DescribeSize(resolved->model()), o.flops_per_second);
  return absl::OkStatus();
}

// --uniform-stages N: N stages alike.
absl::Status FromUniformStages(const base::FlagSet& flags,
                               const SimulateOptions& o, SimulationInputs* in) {
  if (!flags.WasSet("forward-seconds") || !flags.WasSet("backward-seconds")) {
    return absl::InvalidArgumentError(
        "--uniform-stages needs --forward-seconds and --backward-seconds");
  }
  // The simulator refuses more; checked here so no huge profile is built.
  if (o.uniform_stages > (1u << 22)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --uniform-stages: ", o.uniform_stages,
                     " stages: at most ", 1u << 22));
  }
  // Larger counts would overflow the memory sums (the simulator's bounds).
  if (o.message_bytes > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --message-bytes: ", o.message_bytes, ": at most 2^40"));
  }
  if (o.stage_parameters > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --stage-parameters: ", o.stage_parameters, ": at most 2^32"));
  }
  in->profile.set_source("uniform");
  in->profile.set_micro_batch_size(
      static_cast<uint32_t>(std::min<uint64_t>(o.micro_batch, 1u << 30)));
  for (uint64_t j = 0; j < o.uniform_stages; ++j) {
    petra::v1::StageProfile* s = in->profile.add_stages();
    s->set_index(static_cast<uint32_t>(j));
    s->set_reversible(o.reversible);
    s->set_parameters(o.stage_parameters);
    s->set_input_bytes(o.message_bytes);
    s->set_output_bytes(o.message_bytes);
    s->set_forward_seconds(o.forward_seconds);
    s->set_backward_seconds(o.backward_seconds);
    s->set_backward_stored_seconds(o.backward_stored_seconds);
    s->set_forward_stored_seconds(o.forward_stored_seconds);
  }
  in->source = absl::StrFormat(
      "uniform stages: forward %g s, backward %g s, messages %d bytes",
      o.forward_seconds, o.backward_seconds, o.message_bytes);
  return absl::OkStatus();
}

// The run: micro-batches, devices and replicas, links; checked as the
// simulator checks it, its errors naming the flags.
absl::Status ConfigureRun(const base::FlagSet& flags, const SimulateOptions& o,
                          SimulationInputs* in) {
  absl::StatusOr<std::vector<sim::StageCost>> costs =
      sim::StageCostsFromProfile(in->profile);
  if (!costs.ok()) return costs.status();
  sim::SimConfig& c = in->config;
  in->default_links = !flags.WasSet("link-bandwidth");
  c.stages = *std::move(costs);
  c.micro_batches = static_cast<int64_t>(
      std::min<uint64_t>(o.micro_batches, uint64_t{1} << 40));
  c.micro_batch_size = in->profile.micro_batch_size();
  c.group =
      static_cast<int64_t>(std::min<uint64_t>(o.group, uint64_t{1} << 40));
  c.store_activations = o.store_activations;
  const uint64_t stages = c.stages.size();
  uint64_t replicas = o.replicas;
  uint64_t per_replica = o.devices;
  if (o.devices > 0 && !flags.WasSet("replicas") && o.devices > stages) {
    // More devices than stages: copies of the pipeline use the rest.
    replicas = o.devices / stages;
    per_replica = stages;
    in->note = absl::StrCat(
        o.devices, " devices for ", stages, " stages: ", replicas,
        " replicas of the pipeline",
        o.devices % stages > 0
            ? absl::StrCat(", ", o.devices % stages, " devices left idle")
            : "",
        " (--replicas and --stages choose another split)");
  } else if (o.devices > 0) {
    if (o.devices % replicas != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --devices: ", o.devices, " devices do not split into ",
          replicas, " replicas (--replicas): give a multiple of ", replicas));
    }
    per_replica = o.devices / replicas;
  }
  if (per_replica > stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --devices: ", per_replica, " devices for each replica's ", stages,
        " stages: at most one device per stage (more replicas use "
        "more devices: --replicas)"));
  }
  if (replicas > (1u << 20) || replicas > o.micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --replicas: ", replicas, " replicas for ", o.micro_batches,
        " micro-batches: each replica needs one (--micro-batches)"));
  }
  c.devices = static_cast<int>(per_replica);
  c.replicas = static_cast<int>(replicas);
  c.accumulation = static_cast<int64_t>(
      std::min<uint64_t>(o.accumulation, uint64_t{1} << 30));
  c.allreduce_bandwidth = o.allreduce_bandwidth;
  c.stage_devices = o.stage_devices;
  c.link_bandwidth = o.link_bandwidth;
  c.link_latency = o.link_latency;
  c.devices_per_host = static_cast<int>(
      std::min<uint64_t>(o.devices_per_host, uint64_t{1} << 30));
  c.cross_host_bandwidth =
      o.cross_host_bandwidth > 0 ? o.cross_host_bandwidth : o.link_bandwidth;
  if (absl::Status s = sim::ValidateSimConfig(c); !s.ok()) {
    const bool mapping = !c.stage_devices.empty() &&
                         absl::StrContains(s.message(), "stage devices");
    return absl::InvalidArgumentError(
        absl::StrCat(mapping ? "flag --stage-devices: " : "", s.message()));
  }
  return absl::OkStatus();
}

// The stages to simulate, from whichever source the flags name.
absl::StatusOr<SimulationInputs> Inputs(const base::FlagSet& flags,
                                        const SimulateOptions& o,
                                        Failure* failure) {
  const bool from_profile = flags.WasSet("profile");
  const bool from_model = flags.WasSet("arch");
  const bool uniform = flags.WasSet("uniform-stages");
  failure->code = 2;
  if (from_profile + from_model + uniform != 1) {
    return absl::InvalidArgumentError(
        from_profile + from_model + uniform == 0
            ? "give the stage costs: --profile FILE, --arch ARCH (a FLOPs "
              "estimate) or --uniform-stages N"
            : "--profile, --arch and --uniform-stages exclude each other");
  }
  for (const char* name : kModelFlags) {
    if (!from_model && flags.WasSet(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " needs --arch"));
    }
  }
  for (const char* name : kUniformFlags) {
    if (!uniform && flags.WasSet(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " needs --uniform-stages"));
    }
  }
  if (from_profile && flags.WasSet("micro-batch")) {
    return absl::InvalidArgumentError(
        "flag --micro-batch: a profile's times are for its own "
        "micro_batch_size");
  }

  SimulationInputs in;
  absl::Status got = from_profile ? FromProfile(o, &in, failure)
                     : from_model ? FromModel(flags, o, &in, failure)
                                  : FromUniformStages(flags, o, &in);
  if (!got.ok()) return got;
  if (absl::Status s = ConfigureRun(flags, o, &in); !s.ok()) return s;
  return in;
}

}  // namespace

int RunSimulate(const std::string& program,
                const std::vector<std::string>& args) {
  SimulateOptions o;
  base::FlagSet flags(
      absl::StrCat(program,
                   " simulate (--profile FILE | --arch ARCH "
                   "--device-flops-per-second R | --uniform-stages N "
                   "--forward-seconds F --backward-seconds B) [flags]"),
      "Predicts samples/s, device utilisation and memory per stage of each\n"
      "pipeline schedule with a discrete-event simulation (nothing is run):\n"
      "backprop (no overlap), gpipe and 1f1b (flush every --group), delayed\n"
      "(PipeDream-style delayed gradients: inputs and weights stashed),\n"
      "petra and forward_gradient (PETRA's order; stage j's forward also\n"
      "runs its local loss and pushes j + 1 tangents, one per stage up to\n"
      "it, about 6 + 2j forwards, and sends them up; no backward pass).\n"
      "Each device runs one operation at a time; each link direction\n"
      "sends one message at a time (bytes / bandwidth, then the latency).\n"
      "Stage costs come from exactly one of: a profile (petra profile), an\n"
      "estimate from the model's FLOPs (backward = 3 x forward: rebuild or\n"
      "recompute, then a backward of about two forwards), or uniform stages.");
  AddFlags(flags, &o);
  const std::string command = program + " simulate";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;

  if (o.per_stage != "yes" && o.per_stage != "no" && o.per_stage != "auto") {
    std::cerr << command << ": flag --per-stage: \"" << o.per_stage
              << "\" is not yes, no or auto\n";
    return 2;
  }
  std::vector<sim::Schedule> schedules;
  if (o.schedule == "all") {
    schedules = sim::AllSchedules();
  } else {
    absl::StatusOr<sim::Schedule> s = sim::ParseSchedule(o.schedule);
    if (!s.ok()) {
      std::cerr << command << ": flag --schedule: " << s.status().message()
                << "|all\n";
      return 2;
    }
    schedules = {*s};
  }
  Failure failure{2, ""};
  absl::StatusOr<SimulationInputs> in = Inputs(flags, o, &failure);
  if (!in.ok()) {
    std::cerr << command << ": " << in.status().message() << "\n";
    if (failure.code == 2) {
      std::cerr << "Run '" << command << " --help' for the list of flags.\n";
    }
    return failure.code;
  }

  SimulationRuns runs;
  for (sim::Schedule s : schedules) {
    sim::SimConfig c = in->config;
    c.schedule = s;
    absl::StatusOr<sim::SimResult> r = sim::Simulate(c);
    if (!r.ok()) {
      std::cerr << command << ": " << sim::ScheduleName(s) << ": "
                << r.status().message() << "\n";
      return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    if (s == sim::Schedule::kBackprop) runs.backprop = *r;
    runs.runs.push_back(*std::move(r));
  }
  if (runs.backprop.stages.empty()) {  // the baseline of every speed-up
    sim::SimConfig c = in->config;
    c.schedule = sim::Schedule::kBackprop;
    absl::StatusOr<sim::SimResult> r = sim::Simulate(c);
    if (!r.ok()) {
      std::cerr << command << ": backprop: " << r.status().message() << "\n";
      return 1;
    }
    runs.backprop = *std::move(r);
  }
  const bool per_stage =
      o.per_stage == "yes" || (o.per_stage == "auto" && schedules.size() == 1);
  std::cout << (o.json ? SimulationJson(*in, runs)
                       : SimulationText(*in, runs, per_stage));
  return 0;
}

}  // namespace petra::client

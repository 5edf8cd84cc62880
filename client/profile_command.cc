// `petra profile`: what one micro-batch costs on each stage of a job's
// partition, measured on this machine with the stage engine itself (the
// same StageWorker the stage servers run), for `petra simulate` and for
// choosing a partition.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/command_table.h"
#include "client/default_job.h"
#include "petra/v1/profile.pb.h"
#include "services/base/flag_set.h"
#include "services/catalog/architecture_catalog.h"
#include "services/engine/job_plan.h"
#include "services/job/enum_names.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_io.h"
#include "services/job/job_spec_validation.h"
#include "services/model/compute_threads.h"
#include "services/model/device_check.h"
#include "services/model/device_memory.h"
#include "services/model/network.h"
#include "services/model/partition.h"
#include "services/sim/profile_io.h"

namespace petra::client {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds since `start` once `device` has finished what was queued on it (a
// GPU runs asynchronously: without the wait we would time the launches).
double Since(Clock::time_point start, const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The device working set of one operation: the allocator's peak during it
// above what was allocated before it (0 on the CPU).
class WorkingSet {
 public:
  explicit WorkingSet(const torch::Device& device)
      : device_(device.str()),
        before_(model::ReadDeviceMemory(device_).allocated_bytes) {
    model::ResetDeviceMemoryPeak(device_);
  }
  int64_t bytes() const {
    return std::max<int64_t>(
        0, model::ReadDeviceMemory(device_).peak_allocated_bytes - before_);
  }

 private:
  std::string device_;
  int64_t before_;
};

struct ProfileOptions {
  int64_t repeats = 5;
  int64_t warmup = 2;
};

// Each stage's measured times and bytes, over the repeats.
struct Timings {
  std::vector<std::vector<double>> forward, backward;
  std::vector<int64_t> input_bytes, output_bytes, working;
  // The most a stage kept between a micro-batch's forward and its
  // backward (its activation buffer: inputs, or stored graphs).
  std::vector<int64_t> kept;
};

// Timings sized for `stages`.
Timings EmptyTimings(int stages) {
  Timings t;
  t.forward.resize(stages);
  t.backward.resize(stages);
  t.input_bytes.assign(stages, 0);
  t.output_bytes.assign(stages, 0);
  t.working.assign(stages, 0);
  t.kept.assign(stages, 0);
  return t;
}

// Runs micro-batch `r` through `workers` in order (forwards up, then
// backwards down, as backprop would), adding its times to `t` when `keep`
// (past the warm-up).
absl::Status TimePass(
    std::vector<std::unique_ptr<engine::StageWorker>>& workers,
    const model::TensorPair& data, const torch::Tensor& labels,
    const petra::v1::JobSpec& spec, int64_t r, bool keep, Timings& t) {
  const int stages = static_cast<int>(workers.size());
  const int64_t batch = spec.training().micro_batch_size();
  std::vector<model::TensorPair> outputs(stages);
  model::TensorPair x = data;
  engine::BackwardOutput down;
  for (int j = 0; j < stages; ++j) {
    engine::StageWorker& w = *workers[j];
    t.input_bytes[j] = x.nbytes();
    if (!w.last()) {
      WorkingSet set(w.device());
      auto start = Clock::now();
      absl::StatusOr<model::TensorPair> y = w.Forward(r, x, r);
      if (!y.ok()) return y.status();
      if (keep) t.forward[j].push_back(Since(start, w.device()));
      t.working[j] = std::max(t.working[j], set.bytes());
      outputs[j] = *y;
      t.kept[j] =
          std::max<int64_t>(t.kept[j], w.memory().activation_buffer_bytes);
      t.output_bytes[j] = y->nbytes();
      x = *y;
      continue;
    }
    // The last stage's forward, loss and backward are one step: time an
    // evaluation forward alone and call the rest its backward.
    auto start = Clock::now();
    absl::StatusOr<engine::LossOutput> eval = w.EvaluateLoss(x, labels);
    if (!eval.ok()) return eval.status();
    const double forward = Since(start, w.device());
    WorkingSet set(w.device());
    start = Clock::now();
    absl::StatusOr<engine::LossOutput> loss = w.ForwardLoss(r, x, labels, r);
    if (!loss.ok()) return loss.status();
    const double step = Since(start, w.device());
    t.working[j] = std::max(t.working[j], set.bytes());
    if (keep) {
      t.forward[j].push_back(std::min(forward, step));
      t.backward[j].push_back(std::max(0.0, step - forward));
    }
    t.output_bytes[j] = batch * spec.model().num_classes() * 4;
    down = std::move(loss->backward);
  }
  for (int j = stages - 2; j >= 0; --j) {
    engine::StageWorker& w = *workers[j];
    WorkingSet set(w.device());
    auto start = Clock::now();
    absl::StatusOr<engine::BackwardOutput> b =
        w.Backward(r, outputs[j], down.input_grad, r);
    if (!b.ok()) return b.status();
    if (keep) t.backward[j].push_back(Since(start, w.device()));
    t.working[j] = std::max(t.working[j], set.bytes());
    down = std::move(*b);
  }
  return absl::OkStatus();
}

// Each stage's median forward and backward over the repeats, as the job's
// mode runs them (rebuild or recompute) and with the graphs stored.
absl::StatusOr<petra::v1::Profile> Measure(const petra::v1::JobSpec& spec,
                                           const ProfileOptions& o) {
  absl::StatusOr<std::vector<model::BlockRange>> ranges =
      engine::PlanStages(spec);
  if (!ranges.ok()) return ranges.status();
  // Steps per epoch only shapes the learning-rate schedule: any value works.
  absl::StatusOr<std::vector<std::unique_ptr<engine::StageWorker>>> workers =
      engine::BuildStageWorkers(spec, *ranges, /*steps_per_epoch=*/1000);
  if (!workers.ok()) return workers.status();
  const int stages = static_cast<int>(workers->size());
  const int64_t batch = spec.training().micro_batch_size();
  torch::manual_seed(spec.seed());
  // Already on the device: the stages' times leave out the host's copies.
  const torch::Device device = (*workers)[0]->device();
  model::TensorPair data;
  torch::Tensor labels;
  if (catalog::IsLanguageModel(spec.model().architecture())) {
    // Token ids in, and the next token of each as its label.
    const petra::v1::TransformerSpec& t = spec.model().transformer();
    const int64_t vocab = std::max<int64_t>(1, t.vocab());
    data = model::TensorPair{
        torch::randint(0, vocab, {batch, t.seq_len()}, torch::kLong),
        {}}.to(device);
    labels =
        torch::randint(0, vocab, {batch, t.seq_len()}, torch::kLong).to(device);
  } else {
    std::vector<int64_t> shape = {batch};
    for (int64_t d : catalog::InputShape(spec.model().variant())) {
      shape.push_back(d);
    }
    data = model::TensorPair{torch::randn(shape), {}}.to(device);
    labels = torch::randint(0, static_cast<int64_t>(spec.model().num_classes()),
                            {batch}, torch::kLong)
                 .to(device);
  }

  // The same stages with each forward's graph kept, as mode pipeline keeps
  // it without --recompute: the stored backward's time and what a
  // micro-batch's graph holds (the simulator's --store-activations).
  petra::v1::JobSpec stored_spec = spec;
  petra::v1::TrainingSpec* tr = stored_spec.mutable_training();
  tr->set_mode(petra::v1::TRAINING_MODE_PIPELINE);
  tr->set_pipeline_schedule(petra::v1::TrainingSpec::PIPELINE_SCHEDULE_1F1B);
  tr->set_recompute(false);
  // Its weights are current: nothing of the delayed modes' corrections.
  tr->set_stash_inputs(false);
  tr->set_stash_weights(false);
  tr->set_overlap_rebuild(false);
  tr->set_predict_weights(false);
  tr->set_spike_compensation(false);
  tr->set_delay_compensation(0);
  tr->set_discrepancy_correction(false);
  absl::StatusOr<std::vector<std::unique_ptr<engine::StageWorker>>> stored =
      engine::BuildStageWorkers(stored_spec, *ranges, /*steps_per_epoch=*/1000);
  if (!stored.ok()) return stored.status();
  // The two sets of stages take turns, a micro-batch each: a machine
  // whose speed drifts (a shared host's CPUs did by 1.7x between runs a
  // minute apart, 2026-12-03) then drifts under both alike.
  Timings t = EmptyTimings(stages), st = EmptyTimings(stages);
  for (int64_t r = 0; r < o.warmup + o.repeats; ++r) {
    const bool keep = r >= o.warmup;
    if (absl::Status s = TimePass(*workers, data, labels, spec, r, keep, t);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            TimePass(*stored, data, labels, stored_spec, r, keep, st);
        !s.ok()) {
      return s;
    }
  }
  const std::vector<std::vector<double>>& fwd = t.forward;
  const std::vector<std::vector<double>>& bwd = t.backward;
  const std::vector<int64_t>& in_bytes = t.input_bytes;
  const std::vector<int64_t>& out_bytes = t.output_bytes;
  const std::vector<int64_t>& working = t.working;

  petra::v1::Profile p;
  p.set_architecture(job::EnumShortName(spec.model().architecture()));
  p.set_variant(job::EnumShortName(spec.model().variant()));
  p.set_width(spec.model().width());
  p.set_micro_batch_size(static_cast<uint32_t>(batch));
  p.set_device(job::DeviceForStage(spec, 0));
  p.set_threads_per_stage(static_cast<uint32_t>(torch::get_num_threads()));
  p.set_source("measured");
  for (int j = 0; j < stages; ++j) {
    petra::v1::StageProfile* s = p.add_stages();
    s->set_index(j);
    s->set_first_block((*ranges)[j].begin);
    s->set_end_block((*ranges)[j].end);
    s->set_reversible((*workers)[j]->rebuilds_input());
    int64_t params = 0;
    for (const torch::Tensor& t : (*workers)[j]->parameters()) {
      params += t.numel();
    }
    s->set_parameters(params);
    s->set_input_bytes(in_bytes[j]);
    s->set_output_bytes(out_bytes[j]);
    s->set_forward_seconds(Median(fwd[j]));
    s->set_backward_seconds(Median(bwd[j]));
    s->set_device_working_bytes(static_cast<uint64_t>(working[j]));
    // The loss step stores nothing: the last stage's backward is the same.
    s->set_backward_stored_seconds(j + 1 < stages ? Median(st.backward[j])
                                                  : Median(bwd[j]));
    s->set_forward_stored_seconds(Median(st.forward[j]));
    s->set_activation_bytes(static_cast<uint64_t>(st.kept[j]));
    if (!(*workers)[j]->device().is_cpu()) {
      const engine::MemoryStats m = (*workers)[j]->memory();
      s->set_device_state_bytes(
          static_cast<uint64_t>(m.parameters_bytes + m.optimizer_state_bytes));
    }
  }
  return p;
}

void PrintTable(const petra::v1::Profile& p) {
  std::printf(
      "%s (%s, width %g), micro-batch %u, %s, %u thread(s) per stage; median "
      "of the measured micro-batches\n\n",
      p.architecture().c_str(), p.variant().c_str(), p.width(),
      p.micro_batch_size(), p.device().c_str(), p.threads_per_stage());
  // A GPU's allocator figures get their own columns.
  const bool on_device = p.device() != "cpu";
  std::printf("%5s  %-8s  %-10s  %10s  %10s  %12s  %12s  %12s", "stage",
              "blocks", "kind", "params", "forward", "backward", "input",
              "output");
  if (on_device) std::printf("  %12s  %12s", "dev state", "dev working");
  std::printf("\n");
  double f_sum = 0, b_sum = 0, worst = 0;
  for (const petra::v1::StageProfile& s : p.stages()) {
    const double total = s.forward_seconds() + s.backward_seconds();
    f_sum += s.forward_seconds();
    b_sum += s.backward_seconds();
    worst = std::max(worst, total);
    std::printf(
        "%5u  %-8s  %-10s  %10llu  %8.1f ms  %9.1f ms  %9.2f MiB  %9.2f MiB",
        s.index(),
        absl::StrFormat("[%u,%u)", s.first_block(), s.end_block()).c_str(),
        s.reversible() ? "reversible" : "buffered",
        static_cast<unsigned long long>(s.parameters()),
        1e3 * s.forward_seconds(), 1e3 * s.backward_seconds(),
        s.input_bytes() / 1048576.0, s.output_bytes() / 1048576.0);
    if (on_device) {
      std::printf("  %8.2f MiB  %8.2f MiB", s.device_state_bytes() / 1048576.0,
                  s.device_working_bytes() / 1048576.0);
    }
    std::printf("\n");
  }
  std::printf(
      "\nsum: forward %.1f ms, backward %.1f ms per micro-batch; slowest "
      "stage %.1f ms (forward + backward): balance %.0f%%\n",
      1e3 * f_sum, 1e3 * b_sum, 1e3 * worst,
      worst > 0 ? 100.0 * (f_sum + b_sum) / (p.stages_size() * worst) : 0.0);
}

// Parses --balance: stage counts, each >= 1.
absl::StatusOr<std::vector<int>> ParseStageCounts(const std::string& text) {
  std::vector<int> counts;
  if (text.empty()) return counts;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int j = 0;
    if (!absl::SimpleAtoi(item, &j) || j < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --balance: \"", text,
          "\" is not a comma-separated list of stage counts >= 1"));
    }
    counts.push_back(j);
  }
  return counts;
}

// For each J: the cut of the profiled stages into J groups that minimises
// the slowest group (model::BalancedPartition, the coordinator's own), as
// the --split-at that asks for it. Group costs are sums of the profiled
// stages' costs, so a per-block profile is the finest input.
absl::Status PrintBalanced(const petra::v1::Profile& p,
                           const std::vector<int>& counts) {
  std::vector<double> costs;
  for (const petra::v1::StageProfile& s : p.stages()) {
    costs.push_back(s.forward_seconds() + s.backward_seconds());
  }
  double total = 0;
  for (double c : costs) total += c;
  for (int j : counts) {
    absl::StatusOr<std::vector<model::BlockRange>> groups =
        model::BalancedPartition(costs, j);
    if (!groups.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --balance: ", j, " stages from a profile of ",
                       p.stages_size(), ": ", groups.status().message()));
    }
    std::vector<std::string> splits;
    double worst = 0;
    for (const model::BlockRange& g : *groups) {
      if (g.begin > 0) {
        splits.push_back(absl::StrCat(p.stages(g.begin).first_block()));
      }
      double sum = 0;
      for (int i = g.begin; i < g.end; ++i) sum += costs[i];
      worst = std::max(worst, sum);
    }
    std::printf(
        "balanced for %d stage(s): %s (slowest stage %.1f ms, balance "
        "%.0f%%)\n",
        j,
        splits.empty() ? "--stages 1"
                       : ("--split-at " + absl::StrJoin(splits, ",")).c_str(),
        1e3 * worst, worst > 0 ? 100.0 * total / (j * worst) : 0.0);
  }
  return absl::OkStatus();
}

}  // namespace

int RunProfile(const std::string& program,
               const std::vector<std::string>& args) {
  std::string from, output, balance;
  int64_t threads = 1;
  bool json = false;
  ProfileOptions o;
  petra::v1::JobSpec overrides;
  base::FlagSet flags(
      absl::StrCat(program, " profile [--from FILE] [job flags] [flags]"),
      "Measures what one micro-batch costs on each stage of a job's partition\n"
      "on this machine: the forward, and the backward as the stage engine\n"
      "runs it (rebuild or recompute, then one vector-Jacobian product), with\n"
      "the messages' sizes. Stages run one after another on this thread with\n"
      "--threads torch threads, as a stage server pinned to that many cores\n"
      "would; --devices cuda measures them on a GPU. Starts from the same\n"
      "default job as `petra train`. The JSON\n"
      "(--output, --json) is what `petra simulate --profile` reads.");
  flags.AddString("from", &from, job::kJobSpecFileHelp);
  flags.AddInt("threads", &threads, "torch threads (one stage's share)");
  flags.AddInt("repeats", &o.repeats, "micro-batches measured per stage");
  flags.AddInt("warmup", &o.warmup, "micro-batches run first, not measured");
  flags.AddString("output", &output, "write the profile as JSON to this file");
  flags.AddBool("json", &json, "print the profile as JSON instead of a table");
  flags.AddString("balance", &balance,
                  "stage counts J, comma-separated: after the table, print "
                  "the --split-at that balances the profiled stages (best "
                  "from --stages per-block) into J stages");
  job::AddJobFlags(flags, &overrides, DefaultTrainJob());
  const std::string command = program + " profile";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0) {
    return rc;
  }
  for (auto [name, value, min] :
       {std::tuple<const char*, int64_t, int64_t>{"threads", threads, 1},
        {"repeats", o.repeats, 1},
        {"warmup", o.warmup, 0}}) {
    if (value < min) {
      std::cerr << command << ": flag --" << name << ": must be >= " << min
                << "\n";
      return 2;
    }
  }
  absl::StatusOr<std::vector<int>> counts = ParseStageCounts(balance);
  if (!counts.ok()) {
    std::cerr << command << ": " << counts.status().message() << "\n";
    return 2;
  }
  if (json && !counts->empty()) {
    std::cerr << command << ": --balance prints after the table; use "
              << "--output for the JSON instead of --json\n";
    return 2;
  }
  absl::StatusOr<petra::v1::JobSpec> spec =
      job::AssembleJobSpec(DefaultTrainJob(), from, overrides);
  if (!spec.ok()) {
    std::cerr << command << ": " << spec.status().message() << "\n";
    return 1;
  }
  // One device for every stage: a profile describes one kind of device.
  for (int j = 0; j < job::StageCount(*spec); ++j) {
    const std::string device = job::DeviceForStage(*spec, j);
    if (device != job::DeviceForStage(*spec, 0)) {
      std::cerr << command << ": --devices: a profile measures every stage "
                << "on one device (stage 0 on \""
                << job::DeviceForStage(*spec, 0) << "\", stage " << j
                << " on \"" << device << "\")\n";
      return 2;
    }
  }
  if (absl::Status s = model::CheckDeviceAvailable(
          job::DeviceForStage(*spec, 0), "--devices");
      !s.ok()) {
    std::cerr << command << ": " << s.message() << "\n";
    return 1;
  }
  std::ofstream out;
  if (!output.empty()) {
    out.open(output, std::ios::trunc);
    if (!out) {
      std::cerr << command << ": --output: cannot write \"" << output << "\"\n";
      return 1;
    }
  }
  model::SetComputeThreads(static_cast<int>(threads));
  if (!json) {
    std::fprintf(stderr, "%s: measuring %d stages, %lld micro-batches each\n",
                 command.c_str(), job::StageCount(*spec),
                 static_cast<long long>(o.warmup + o.repeats));
  }
  absl::StatusOr<petra::v1::Profile> p = Measure(*spec, o);
  if (!p.ok()) {
    std::cerr << command << ": " << p.status().message() << "\n";
    return 1;
  }
  const std::string text = sim::ProfileToJson(*p);
  if (json) {
    std::cout << text;
  } else {
    PrintTable(*p);
    if (absl::Status s = PrintBalanced(*p, *counts); !s.ok()) {
      std::cerr << command << ": " << s.message() << "\n";
      return 1;
    }
  }
  if (out.is_open()) {
    out << text;
    out.close();
    if (!out) {
      std::cerr << command << ": --output: writing \"" << output
                << "\" failed\n";
      return 1;
    }
    if (!json) std::cout << "profile written to " << output << "\n";
  }
  return 0;
}

}  // namespace petra::client

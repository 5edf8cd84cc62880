// `petra train`: trains a job to the end on this machine and reports it.
// With no flags: the embedded default, a small RevNet18 on Fashion-MNIST.
//
// Runs on the in-process runner (every stage a thread). The gRPC fleet on
// loopback replaces it as the default once stage servers run the engine.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "services/cli/flag_set.h"
#include "services/data/dataset.h"
#include "services/engine/in_process_runner.h"
#include "services/job/enum_names.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_io.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network.h"

namespace petra::client {
namespace {

using Clock = std::chrono::steady_clock;

// The embedded default job: the one place its values live.
petra::v1::JobSpec DefaultTrainJob() {
  petra::v1::JobSpec s;
  s.set_name("default-revnet18-fashion-mnist");
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.25);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  s.mutable_training()->set_epochs(3);
  s.set_seed(1);
  return s;
}

std::string Duration(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60)
                 : absl::StrFormat("%ds", s);
}

std::string ReportJson(const petra::v1::JobSpec& spec,
                       const std::vector<engine::EpochReport>& epochs,
                       double wall) {
  const engine::EpochReport& last = epochs.back();
  double samples = 0, train_seconds = 0;
  for (const auto& e : epochs) {
    samples += e.samples_per_second * e.train_seconds;
    train_seconds += e.train_seconds;
  }
  std::string out = absl::StrFormat(
      "{\n  \"job\": \"%s\",\n  \"runner\": \"in-process\",\n"
      "  \"test_accuracy\": %.6f,\n  \"test_loss\": %.6f,\n  \"train_loss\": "
      "%.6f,\n"
      "  \"train_accuracy\": %.6f,\n  \"samples_per_second\": %.2f,\n"
      "  \"wall_seconds\": %.2f,\n  \"epochs\": [",
      spec.name(), last.test_accuracy, last.test_loss, last.train_loss,
      last.train_accuracy, train_seconds > 0 ? samples / train_seconds : 0.0,
      wall);
  for (size_t i = 0; i < epochs.size(); ++i) {
    const auto& e = epochs[i];
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"epoch\": %d, \"train_loss\": %.6f, \"train_accuracy\": "
        "%.6f, \"test_accuracy\": %.6f, \"test_loss\": %.6f, "
        "\"samples_per_second\": %.2f, \"train_seconds\": %.2f}",
        i ? "," : "", e.epoch, e.train_loss, e.train_accuracy, e.test_accuracy,
        e.test_loss, e.samples_per_second, e.train_seconds);
  }
  absl::StrAppend(&out, "\n  ],\n  \"stages\": [");
  for (size_t i = 0; i < last.stages.size(); ++i) {
    const engine::StageReport& s = last.stages[i];
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"index\": %d, \"blocks\": [%d, %d], \"rebuilds_input\": %s, "
        "\"memory_bytes\": {\"parameters\": %d, \"optimizer_state\": %d, "
        "\"activation_buffer\": %d, \"weight_stash\": %d, \"peak\": %d, "
        "\"peak_activation_buffer\": %d, \"peak_weight_stash\": %d}, "
        "\"staleness_mean\": %.4f, \"delay_ticks_mean\": %.4f, "
        "\"optimizer_steps\": %d}",
        i ? "," : "", s.index, s.blocks.begin, s.blocks.end,
        s.rebuilds_input ? "true" : "false", s.memory.parameters_bytes,
        s.memory.optimizer_state_bytes, s.memory.activation_buffer_bytes,
        s.memory.weight_stash_bytes, s.memory.peak_bytes,
        s.memory.peak_activation_buffer_bytes, s.memory.peak_weight_stash_bytes,
        s.staleness_mean, s.delay_ticks_mean, s.optimizer_steps);
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace

int RunTrain(const std::string& program, const std::vector<std::string>& args) {
  std::string from, report_path, data_root = "/usr/share/datasets";
  int64_t threads = 0;
  bool quiet = false;
  petra::v1::JobSpec overrides;
  cli::FlagSet flags(
      absl::StrCat(program, " train [--from FILE] [job flags] [--report FILE]"),
      "Trains a job to the end on this machine, with progress on the "
      "terminal,\n"
      "and prints the final accuracy. With no flags it trains the embedded\n"
      "default: RevNet18 (width 0.25, one stage per block) on Fashion-MNIST\n"
      "for 3 epochs with PETRA. Every stage runs on its own thread (the\n"
      "in-process runner).");
  flags.AddString("from", &from,
                  "job spec file (JSON or text proto) to start from");
  flags.AddString("data-root", &data_root,
                  "directory dataset paths are resolved under");
  flags.AddString("report", &report_path,
                  "write a JSON report of the run to this file");
  flags.AddInt("threads-per-stage", &threads,
               "torch threads per stage; 0 = cores / stages, at least 1");
  flags.AddBool("quiet", &quiet, "print only the final result");
  job::AddJobFlags(flags, &overrides);
  const std::string command = program + " train";
  if (int rc = cli::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  if (threads < 0) {
    std::cerr << command << ": flag --threads-per-stage: must be >= 0\n";
    return 2;
  }
  absl::StatusOr<petra::v1::JobSpec> resolved =
      job::AssembleJobSpec(DefaultTrainJob(), from, overrides);
  if (!resolved.ok()) {
    std::cerr << command << ": " << resolved.status().message() << "\n";
    return 1;
  }
  for (int j = 0; j < job::StageCount(*resolved); ++j) {
    if (job::DeviceForStage(*resolved, j) != "cpu") {
      std::cerr << program << " train: device \""
                << job::DeviceForStage(*resolved, j)
                << "\": the in-process runner runs on the CPU only\n";
      return 1;
    }
  }
  if (!report_path.empty()) {
    // Fail before training, not after, when the report cannot be written.
    std::ofstream probe(report_path, std::ios::app);
    if (!probe) {
      std::cerr << program << " train: --report: cannot write \"" << report_path
                << "\"\n";
      return 1;
    }
  }

  const auto start = Clock::now();
  const auto& m = resolved->model();
  const std::vector<int64_t> chw = model::InputShape(m.variant());
  if (!quiet) {
    std::cout << "petra train: " << job::EnumShortName(m.architecture()) << " ("
              << job::EnumShortName(m.variant()) << ", width " << m.width()
              << ") on " << job::EnumShortName(resolved->dataset().kind())
              << ", mode " << job::EnumShortName(resolved->training().mode())
              << ", " << job::StageCount(*resolved) << " stages, micro-batch "
              << resolved->training().micro_batch_size()
              << ", k = " << resolved->training().accumulation_steps() << ", "
              << resolved->training().epochs() << " epochs" << std::endl;
  }
  absl::StatusOr<data::Splits> data =
      data::LoadForJob(*resolved, data_root, chw);
  if (!data.ok()) {
    std::cerr << program << " train: " << data.status().message() << "\n";
    return 1;
  }
  const int64_t per_epoch =
      data->train.size() / resolved->training().micro_batch_size();
  const int64_t epochs = resolved->training().epochs();

  std::mutex mu;
  int current_epoch = 1;
  int64_t done = 0;
  double loss_sum = 0;
  auto last_print = Clock::now();
  const bool tty = isatty(STDOUT_FILENO);
  engine::RunnerOptions options;
  options.threads_per_stage = static_cast<int>(threads);
  options.on_step = [&](const engine::StepReport& r) {
    if (quiet) return;
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    loss_sum += r.loss;
    const auto now = Clock::now();
    if (now - last_print < std::chrono::seconds(tty ? 1 : 15)) return;
    last_print = now;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const int64_t total = per_epoch * epochs;
    const int64_t overall = (current_epoch - 1) * per_epoch + r.micro_batch + 1;
    const double eta =
        elapsed / std::max<int64_t>(1, overall) * (total - overall);
    std::printf(
        "%sepoch %d/%lld  micro-batch %lld/%lld  loss %.4f  elapsed %s  ETA "
        "%s%s",
        tty ? "\r" : "", current_epoch, static_cast<long long>(epochs),
        static_cast<long long>(r.micro_batch + 1),
        static_cast<long long>(per_epoch), loss_sum / done,
        Duration(elapsed).c_str(), Duration(eta).c_str(), tty ? "   " : "\n");
    std::fflush(stdout);
  };
  options.on_epoch = [&](const engine::EpochReport& e) {
    std::lock_guard<std::mutex> lock(mu);
    ++current_epoch;
    done = 0;
    loss_sum = 0;
    if (quiet) return;
    std::printf(
        "%sepoch %d/%lld: train loss %.4f, train acc %.2f%%, test acc %.2f%%, "
        "%.0f samples/s, %s\n",
        tty ? "\r" : "", e.epoch, static_cast<long long>(epochs), e.train_loss,
        100 * e.train_accuracy, 100 * e.test_accuracy, e.samples_per_second,
        Duration(e.train_seconds).c_str());
    std::fflush(stdout);
  };
  absl::StatusOr<std::unique_ptr<engine::InProcessRunner>> runner =
      engine::InProcessRunner::Create(*resolved, std::move(*data), options);
  if (!runner.ok()) {
    std::cerr << program << " train: " << runner.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<engine::EpochReport>> reports = (*runner)->Run();
  if (!reports.ok()) {
    std::cerr << program << " train: " << reports.status().message() << "\n";
    return 1;
  }
  if (reports->empty()) {
    std::cerr << program << " train: no epoch ran\n";
    return 1;
  }
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("test accuracy %.2f%%, train loss %.4f, %s\n",
              100 * reports->back().test_accuracy, reports->back().train_loss,
              Duration(wall).c_str());
  if (!quiet) {
    // Where the memory went and how stale each stage's gradients were.
    std::printf("\n%-6s %-7s %-9s %6s %10s %12s %14s %12s %10s\n", "stage",
                "blocks", "rebuilds", "delay", "staleness", "params+opt",
                "input buffer", "weight stash", "peak");
    for (const engine::StageReport& st : reports->back().stages) {
      const engine::MemoryStats& mem = st.memory;
      std::printf(
          "%-6d %-7s %-9s %6.1f %10.2f %10.2fMB %12.2fMB %10.2fMB %8.2fMB\n",
          st.index,
          absl::StrCat(st.blocks.begin, "-", st.blocks.end - 1).c_str(),
          st.rebuilds_input ? "yes" : "no", st.delay_ticks_mean,
          st.staleness_mean,
          (mem.parameters_bytes + mem.optimizer_state_bytes) / 1e6,
          mem.peak_activation_buffer_bytes / 1e6,
          mem.peak_weight_stash_bytes / 1e6, mem.peak_bytes / 1e6);
    }
    std::printf(
        "(delay in ticks and staleness in optimizer steps between a "
        "micro-batch's\n"
        " forward and its backward; buffer, stash and peak are highest "
        "values)\n");
  }
  if (!report_path.empty()) {
    std::ofstream out(report_path, std::ios::trunc);
    out << ReportJson(*resolved, *reports, wall);
    if (!out) {
      std::cerr << program << " train: --report: writing \"" << report_path
                << "\" failed\n";
      return 1;
    }
    if (!quiet) std::cout << "report written to " << report_path << "\n";
  }
  return 0;
}

}  // namespace petra::client

// `petra train`: trains a job to the end on this machine and reports it.
// With no flags: the embedded default, a small RevNet18 on Fashion-MNIST.
//
// By default it starts a fleet inside the process (a coordinator and one
// stage server per stage, real gRPC on loopback) and drives it as any client
// would; --runner in-process runs the same job on threads and queues (the
// reference the fleet is checked against).
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/command_table.h"
#include "client/default_job.h"
#include "client/job_progress.h"
#include "client/local_fleet.h"
#include "client/progress_words.h"
#include "coordinator/job_layout.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/base/durable_file.h"
#include "services/base/flag_set.h"
#include "services/base/paths.h"
#include "services/base/shutdown_signal.h"
#include "services/catalog/architecture_catalog.h"
#include "services/data/dataset.h"
#include "services/engine/epoch_progress.h"
#include "services/engine/in_process_runner.h"
#include "services/engine/job_plan.h"
#include "services/engine/stage_report.h"
#include "services/job/enum_names.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_io.h"
#include "services/job/job_spec_validation.h"
#include "services/model/device_check.h"
#include "services/model/network.h"
#include "services/wire/grpc_defaults.h"

namespace petra::client {
namespace {

using Clock = std::chrono::steady_clock;

struct TrainOptions {
  std::string data_root;
  int data_workers = 0;
  std::string state_dir;  // fleet only; empty = a temporary directory
  int threads_per_stage = 1;
  bool quiet = false;
  std::string output;  // where the trained model's export goes
};

// The final Job and the epoch-end progress of a run, whichever runner ran it.
struct TrainResult {
  petra::v1::Job job;
  std::vector<petra::v1::Progress> epochs;
  uint64_t model_bytes = 0;  // of the export written to TrainOptions::output
};

// The export, written whole or not at all to `output`.
absl::StatusOr<uint64_t> WriteModel(const std::string& output,
                                    const std::string& bytes) {
  if (absl::Status s = base::WriteFileAtomically(output, bytes); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--output: writing \"", output,
                                               "\" failed: ", s.message()));
  }
  return bytes.size();
}

// The export file `from`, copied whole or not at all to `output`.
absl::StatusOr<uint64_t> CopyModel(const std::filesystem::path& from,
                                   const std::string& output) {
  const std::string partial = output + ".partial";
  std::error_code ec;
  if (std::filesystem::copy_file(
          from, partial, std::filesystem::copy_options::overwrite_existing,
          ec)) {
    const uint64_t bytes = std::filesystem::file_size(partial, ec);
    if (!ec) std::filesystem::rename(partial, output, ec);
    if (!ec) return bytes;
  }
  std::error_code ignored;
  std::filesystem::remove(partial, ignored);
  return absl::InternalError(absl::StrCat("--output: copying the export \"",
                                          from.string(), "\" to \"", output,
                                          "\" failed: ", ec.message()));
}

// A job's name as a file name: what a path may not hold becomes '_'.
std::string ModelFileName(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                      c == '_' || c == '.';
    out += keep ? c : '_';
  }
  if (out.empty() || out.find_first_not_of('.') == std::string::npos) {
    out = "model";
  }
  return out + ".pt";
}

absl::StatusOr<TrainResult> RunInProcess(const petra::v1::JobSpec& spec,
                                         const TrainOptions& options) {
  data::LoadOptions load;
  load.data_workers = options.data_workers;
  if (!options.quiet) {
    load.on_activity = [](const std::string& activity) {
      std::printf("%s\n", activity.c_str());
      std::fflush(stdout);
    };
  }
  absl::StatusOr<data::Splits> data =
      data::LoadForJob(spec, options.data_root,
                       catalog::InputShape(spec.model().variant()), load);
  if (!data.ok()) return data.status();
  const int64_t per_epoch =
      data->train.size() / spec.training().micro_batch_size();
  const int64_t epochs = spec.training().epochs();
  absl::StatusOr<int64_t> steps_per_epoch =
      engine::StepsPerEpoch(spec, data->train.size());
  if (!steps_per_epoch.ok()) return steps_per_epoch.status();
  const engine::ProgressBuilder progress(spec, *steps_per_epoch,
                                         data->test.bytes_per_token());
  const auto start = Clock::now();
  const bool tty = isatty(STDOUT_FILENO);
  std::mutex mu;
  int stepping_epoch = 1;
  int64_t done = 0;
  double loss_sum = 0;
  auto last_print = Clock::now();
  TrainResult result;
  result.job.set_id("in-process");
  *result.job.mutable_spec() = spec;
  engine::RunnerOptions o;
  o.threads_per_stage = options.threads_per_stage;
  o.on_step = [&](const engine::StepReport& r) {
    if (options.quiet) return;
    std::lock_guard<std::mutex> lock(mu);
    // A pass may run several epochs (the pipeline stays full between
    // evaluations): the step says which.
    if (static_cast<int>(r.epoch) != stepping_epoch) {
      stepping_epoch = static_cast<int>(r.epoch);
      done = 0;
      loss_sum = 0;
    }
    ++done;
    loss_sum += r.loss;
    const auto now = Clock::now();
    if (now - last_print < std::chrono::seconds(tty ? 1 : 15)) return;
    last_print = now;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const int64_t overall =
        (stepping_epoch - 1) * per_epoch + r.micro_batch + 1;
    const double eta = elapsed / std::max<int64_t>(1, overall) *
                       (per_epoch * epochs - overall);
    std::printf(
        "%sepoch %d/%lld  micro-batch %lld/%lld  loss %.4f  elapsed "
        "%s  ETA %s%s",
        tty ? "\r" : "", stepping_epoch, static_cast<long long>(epochs),
        static_cast<long long>(r.micro_batch + 1),
        static_cast<long long>(per_epoch), loss_sum / done,
        Duration(elapsed).c_str(), Duration(eta).c_str(), tty ? "   " : "\n");
    std::fflush(stdout);
  };
  o.on_epoch = [&](const engine::EpochReport& e) {
    std::lock_guard<std::mutex> lock(mu);
    const petra::v1::Progress p = progress.AfterEpoch(
        e, std::chrono::duration<double>(Clock::now() - start).count());
    result.epochs.push_back(p);
    *result.job.mutable_progress() = p;
    if (options.quiet) return;
    std::printf("%s%s: %s, %s\n", tty ? "\r" : "", PointName(p).c_str(),
                EpochFigures(p, IsLanguageModelJob(spec)).c_str(),
                Duration(e.train_seconds).c_str());
    std::fflush(stdout);
  };
  absl::StatusOr<std::unique_ptr<engine::InProcessRunner>> runner =
      engine::InProcessRunner::Create(spec, std::move(*data), o);
  if (!runner.ok()) return runner.status();
  for (const model::BlockRange& r : (*runner)->partition()) {
    petra::v1::StagePlacement* p = result.job.add_stages();
    p->set_stage_index(result.job.stages_size() - 1);
    p->set_layer_begin(r.begin);
    p->set_layer_end(r.end);
    p->set_device(job::DeviceForStage(spec, p->stage_index()));
  }
  absl::StatusOr<std::vector<engine::EpochReport>> reports = (*runner)->Run();
  if (!reports.ok()) return reports.status();
  if (reports->empty()) return absl::InternalError("no epoch ran");
  result.job.set_state(petra::v1::JOB_STATE_SUCCEEDED);
  absl::StatusOr<std::string> model = (*runner)->ExportFile();
  if (!model.ok()) return model.status();
  absl::StatusOr<uint64_t> written = WriteModel(options.output, *model);
  if (!written.ok()) return written.status();
  result.model_bytes = *written;
  return result;
}

// Removes the temporary state directory however the run ends.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) petra::base::RemoveTree(path).IgnoreError();
  }
};

absl::StatusOr<TrainResult> RunFleet(const petra::v1::JobSpec& spec,
                                     TrainOptions options, bool* interrupted) {
  TempDir temp;
  if (options.state_dir.empty()) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "petra-train-XXXXXX")
            .string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError("cannot create a temporary state directory");
    }
    temp.path = options.state_dir = pattern;
  }
  LocalFleet::Options fo;
  // R copies of the J-stage pipeline: replica r's stage j is server
  // r J + j (the coordinator places them in that order on one host).
  const int stages = job::StageCount(spec);
  fo.stages = stages * static_cast<int>(std::max<uint32_t>(1, spec.replicas()));
  for (int k = 0; k < fo.stages; ++k) {
    fo.devices.push_back(job::DeviceForStage(spec, k % stages));
  }
  fo.threads_per_stage = options.threads_per_stage;
  fo.data_root = options.data_root;
  std::error_code no_folder;
  if (spec.dataset().kind() == petra::v1::DATASET_KIND_SYNTHETIC &&
      !std::filesystem::is_directory(options.data_root, no_folder)) {
    // A synthetic job reads no file, and the default data root need not
    // exist on this machine; the coordinator wants a folder all the same.
    fo.data_root = options.state_dir;
  }
  fo.data_workers = options.data_workers;
  fo.state_dir = options.state_dir;
  fo.keep_cache = temp.path.empty();
  absl::StatusOr<std::unique_ptr<LocalFleet>> fleet = LocalFleet::Start(fo);
  if (!fleet.ok()) return fleet.status();
  auto stub = petra::v1::CoordinatorService::NewStub(
      wire::CreateChannel((*fleet)->coordinator_address()));
  if (!options.quiet) {
    const std::vector<int> ports = (*fleet)->metrics_ports();
    for (size_t i = 0; i < ports.size(); ++i) {
      // Server k runs replica k / J's stage k % J.
      const int k = static_cast<int>(i) - 1;
      const std::string who =
          i == 0 ? "coordinator"
          : spec.replicas() > 1
              ? absl::StrCat("replica ", k / stages, " stage ", k % stages)
              : absl::StrCat("stage ", k);
      std::printf("metrics: %s http://127.0.0.1:%d/metrics\n", who.c_str(),
                  ports[i]);
    }
  }

  grpc::ClientContext context;
  petra::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  petra::v1::Job job;
  if (grpc::Status s = stub->SubmitJob(&context, request, &job); !s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  // Ctrl-C cancels the job; the watch then ends and everything stops.
  base::InstallShutdownHandlers();
  std::thread on_signal([&] {
    if (base::WaitForShutdownSignal() == 0) return;
    *interrupted = true;
    std::fprintf(stderr,
                 "\ninterrupted: cancelling %s and stopping the "
                 "servers\n",
                 job.id().c_str());
    grpc::ClientContext c;
    petra::v1::CancelJobRequest cancel;
    cancel.set_job_id(job.id());
    petra::v1::Job ignored;
    (void)stub->CancelJob(&c, cancel, &ignored);
  });
  ProgressPrinter printer(options.quiet);
  absl::StatusOr<petra::v1::Job> end = FollowJob(*stub, job.id(), printer);
  base::WakeShutdownWaiter();
  on_signal.join();
  (*fleet)->Stop();
  if (!end.ok()) return end.status();
  if (end->state() != petra::v1::JOB_STATE_SUCCEEDED) {
    if (end->state() == petra::v1::JOB_STATE_CANCELLED) {
      return absl::CancelledError(absl::StrCat(end->id(), " was cancelled"));
    }
    return absl::Status(static_cast<absl::StatusCode>(end->error().code()),
                        end->error().message());
  }
  // The coordinator's export of the job, copied out of the state directory
  // (a temporary one is removed on return).
  absl::StatusOr<uint64_t> written = CopyModel(
      coordinator::JobLayout((*fleet)->coordinator_state_dir(), end->id())
          .export_file(),
      options.output);
  if (!written.ok()) return written.status();
  return TrainResult{*end, printer.epochs(), *written};
}

}  // namespace

namespace {

// The line that says what is about to train, and where.
void PrintPlan(const petra::v1::JobSpec& spec, int stages, int servers,
               bool in_process) {
  const auto& m = spec.model();
  std::cout << "petra train: " << job::EnumShortName(m.architecture()) << " ("
            << (m.variant() != petra::v1::VARIANT_UNSPECIFIED
                    ? job::EnumShortName(m.variant()) + ", "
                    : "")
            << catalog::DescribeSize(m) << ") on "
            << job::EnumShortName(spec.dataset().kind()) << ", mode "
            << job::EnumShortName(spec.training().mode()) << ", " << stages
            << " stages"
            << (spec.replicas() > 1
                    ? absl::StrCat(" x ", spec.replicas(), " replicas")
                    : "")
            << ", micro-batch " << spec.training().micro_batch_size()
            << ", k = " << spec.training().accumulation_steps() << ", "
            << job::EnumShortName(spec.optimizer().kind()) << " lr "
            << spec.optimizer().learning_rate()
            << (spec.schedule().delay_lr_power() > 0
                    ? absl::StrCat(" / (1 + delay)^",
                                   spec.schedule().delay_lr_power())
                    : "")
            << " (recipe " << job::EnumShortName(spec.recipe()) << "), "
            << spec.training().epochs() << " epochs, "
            << (in_process ? "in-process runner"
                           : "fleet on loopback (a coordinator and " +
                                 std::to_string(servers) + " stage servers)")
            << std::endl;
}

// Fails before training, not after, when a file cannot be written; the
// probe leaves no file behind (a run stopped early writes none).
bool CanWriteOutputs(const std::string& command, const std::string& report_path,
                     const std::string& output) {
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--report", report_path},
        {"--output", output}}) {
    if (path.empty()) continue;
    std::error_code ec;
    const bool existed = std::filesystem::exists(path, ec);
    errno = 0;
    std::ofstream probe(path, std::ios::app);
    if (!probe) {
      std::cerr << command << ": " << flag << ": cannot write \"" << path
                << "\": " << std::strerror(errno != 0 ? errno : EIO) << "\n";
      return false;
    }
    probe.close();
    if (!existed) std::filesystem::remove(path, ec);
  }

  return true;
}

// Whole or not at all: a reader never sees half a report.
bool WriteReport(const std::string& command, const std::string& path,
                 const std::string& json, bool quiet) {
  if (absl::Status w = base::WriteFileAtomically(path, json); !w.ok()) {
    std::cerr << command << ": --report: writing \"" << path
              << "\" failed: " << w.message() << "\n";
    return false;
  }
  if (!quiet) std::cout << "report written to " << path << "\n";
  return true;
}

// The flags of the run itself (not the job's), each refused with exit 2.
bool RunFlagsAreSane(const std::string& command, int64_t threads,
                     int64_t data_workers, const std::string& runner) {
  if (threads < 0) {
    std::cerr << command << ": flag --threads-per-stage: must be >= 0\n";
    return false;
  }
  if (data_workers < 0 || data_workers > data::kMaxDataWorkers) {
    std::cerr << command << ": flag --data-workers: must be in [0, "
              << data::kMaxDataWorkers << "]\n";
    return false;
  }
  if (runner != "fleet" && runner != "in-process") {
    std::cerr << command << ": flag --runner: \"" << runner
              << "\" is not fleet or in-process\n";
    return false;
  }
  return true;
}

// Every stage's device is on this machine.
bool DevicesAvailable(const std::string& command,
                      const petra::v1::JobSpec& spec) {
  for (int j = 0; j < job::StageCount(spec); ++j) {
    if (absl::Status s = model::CheckDeviceAvailable(
            job::DeviceForStage(spec, j), "--devices");
        !s.ok()) {
      std::cerr << command << ": " << s.message() << "\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int RunTrain(const std::string& program, const std::vector<std::string>& args) {
  std::string from, report_path, data_root = job::kDefaultDataRoot;
  std::string runner = "fleet", state_dir, output;
  int64_t threads = 0;
  bool quiet = false;
  petra::v1::JobSpec overrides;
  base::FlagSet flags(
      absl::StrCat(program, " train [--from FILE] [job flags] [--report FILE]"),
      "Trains a job to the end on this machine, with progress on the "
      "terminal,\n"
      "and prints the final accuracy. With no flags it trains the embedded\n"
      "default job, whose values the flags below show as their defaults;\n"
      "--from FILE replaces it (what the file leaves out gets the defaults\n"
      "`petra spec --from FILE` prints).\n\n"
      "The job runs on a fleet started inside this process: a coordinator\n"
      "and one stage server per stage on loopback (ephemeral ports, real\n"
      "gRPC), driven like any client drives a cluster. Ctrl-C cancels the\n"
      "job and stops every server. --runner in-process trains the same job\n"
      "on threads joined by queues instead.");
  flags.AddString("from", &from,
                  absl::StrCat(job::kJobSpecFileHelp, ", to start from"));
  flags.AddString("data-root", &data_root,
                  "directory dataset paths are resolved under");
  flags.AddString("report", &report_path,
                  "write a JSON report of the run to this file");
  flags.AddCustom("output", "FILE", "NAME.pt here, NAME the job's name",
                  "write the trained model's export (state_dict, as `petra "
                  "export` writes it) to this file",
                  [&output](const std::string& v) {
                    output = v;
                    return absl::OkStatus();
                  });
  int64_t data_workers = 0;
  flags.AddInt("data-workers", &data_workers,
               "threads decoding image-folder datasets ahead of training; 0 "
               "= one per core this process may use");
  flags.AddString("runner", &runner, "fleet (loopback gRPC) or in-process");
  flags.AddString("state-dir", &state_dir,
                  "fleet: where checkpoints and job records go (default: a "
                  "temporary directory, removed at the end)");
  flags.AddInt("threads-per-stage", &threads,
               "torch threads per stage; 0 = cores / stages, at least 1");
  flags.AddBool("quiet", &quiet, "print only the final result");
  job::AddJobFlags(flags, &overrides, DefaultTrainJob());
  const std::string command = program + " train";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  if (!RunFlagsAreSane(command, threads, data_workers, runner)) return 2;
  const bool in_process = runner == "in-process";
  absl::StatusOr<petra::v1::JobSpec> resolved =
      job::AssembleJobSpec(DefaultTrainJob(), from, overrides);
  if (!resolved.ok()) {
    std::cerr << command << ": " << resolved.status().message() << "\n";
    return 1;
  }
  // What only the data can say (an image folder's class count).
  if (absl::Status s = data::FillFromData(&*resolved, data_root); !s.ok()) {
    std::cerr << command << ": " << s.message() << "\n";
    return 1;
  }
  if (absl::Status s = job::ValidateJobSpec(*resolved); !s.ok()) {
    std::cerr << command << ": " << s.message() << "\n";
    return 1;
  }
  // A resumed job's checkpoints live in a coordinator's state directory.
  if (!resolved->checkpoint().resume_from_job().empty() &&
      (in_process || state_dir.empty())) {
    std::cerr << command
              << ": --resume-from needs the fleet runner and the --state-dir "
                 "of the run that wrote the job's checkpoints\n";
    return 2;
  }
  if (!DevicesAvailable(command, *resolved)) return 1;
  if (output.empty()) output = ModelFileName(resolved->name());
  if (!CanWriteOutputs(command, report_path, output)) return 1;
  const auto start = Clock::now();
  const int stages = job::StageCount(*resolved);
  const int servers =
      stages * static_cast<int>(std::max<uint32_t>(1, resolved->replicas()));
  TrainOptions options;
  options.data_root = data_root;
  options.data_workers = static_cast<int>(data_workers);
  options.state_dir = state_dir;
  options.quiet = quiet;
  options.output = output;
  options.threads_per_stage =
      threads > 0
          ? static_cast<int>(threads)
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                            servers);
  if (!quiet) PrintPlan(*resolved, stages, servers, in_process);
  bool interrupted = false;
  absl::StatusOr<TrainResult> result =
      in_process ? RunInProcess(*resolved, options)
                 : RunFleet(*resolved, options, &interrupted);
  if (!result.ok()) {
    std::cerr << command << ": " << result.status().message() << "\n";
    return interrupted ? 130 : 1;
  }
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  const petra::v1::Progress& last = result->job.progress();
  std::printf("%s, train loss %.4f, %s\n",
              ResultFigures(last, IsLanguageModelJob(*resolved)).c_str(),
              last.train_loss(), Duration(wall).c_str());
  if (!quiet) PrintStageTable(result->job);
  std::printf("model written to %s (%llu bytes)\n", output.c_str(),
              static_cast<unsigned long long>(result->model_bytes));
  if (!report_path.empty() &&
      !WriteReport(command, report_path,
                   ReportJson(result->job, result->epochs, wall,
                              in_process ? "in-process" : "fleet", output),
                   quiet)) {
    return 1;
  }
  return 0;
}

}  // namespace petra::client

// The coordinator's client commands on jobs: submit, watch, status, list,
// cancel, export (servers: servers_command.cc). Each maps flags to one
// CoordinatorService call.
#include <google/protobuf/util/time_util.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/coordinator_connection.h"
#include "client/default_job.h"
#include "client/job_progress.h"
#include "client/plot_command.h"
#include "client/servers_command.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/base/flag_set.h"
#include "services/base/json_text.h"
#include "services/base/shutdown_signal.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_io.h"

namespace petra::client {
namespace {

using petra::v1::CoordinatorService;

void PrintJobLine(const petra::v1::Job& job) {
  const petra::v1::Progress& p = job.progress();
  std::printf(
      "%-10s %-10s %-28s epoch %u/%u  step %llu/%llu  test acc %s%s\n",
      job.id().c_str(), StateName(job.state()).c_str(),
      job.spec().name().empty() ? "-" : job.spec().name().c_str(), p.epoch(),
      job.spec().training().epochs(), static_cast<unsigned long long>(p.step()),
      static_cast<unsigned long long>(p.total_steps()),
      p.has_test_accuracy()
          ? absl::StrFormat("%.2f%%", 100 * p.test_accuracy()).c_str()
          : "-",
      job.owner().empty() ? "" : absl::StrCat("  owner ", job.owner()).c_str());
}

// A line per recovery: when, why, from which checkpoint, how long.
void PrintRecoveries(const petra::v1::Job& job) {
  for (int i = 0; i < job.recoveries_size(); ++i) {
    const petra::v1::Recovery& r = job.recoveries(i);
    const std::string from =
        r.restored_epoch() > 0
            ? absl::StrCat("from epoch ", r.restored_epoch(), "'s checkpoint")
            : "from its initial weights";
    const bool pending = r.seconds() == 0 && i + 1 == job.recoveries_size() &&
                         job.state() == petra::v1::JOB_STATE_RECOVERING;
    std::printf("recovery %d at %s: %s; %s\n", i + 1,
                google::protobuf::util::TimeUtil::ToString(r.time()).c_str(),
                r.reason().c_str(),
                pending
                    ? "under way"
                    : absl::StrCat("training again ", from, " after ",
                                   absl::StrFormat("%.1f", r.seconds()), " s")
                          .c_str());
  }
}

// What `watch` and `submit --watch` exit with; said in their --help.
constexpr int kExitJobFailed = 1;
constexpr int64_t kDefaultReconnectSeconds = 300;
constexpr int kExitCoordinatorGone = 3;
constexpr char kWatchExitCodes[] =
    "Exits 0 when the job succeeded, 1 when it failed or was cancelled (or "
    "the\ncoordinator refused the call), 3 when the coordinator stayed "
    "unreachable\npast --reconnect-timeout, 130 on Ctrl-C (the job runs on).";

// The flag that says how long a watch rides through a lost coordinator.
void AddReconnectFlag(base::FlagSet& flags, int64_t* seconds) {
  flags.AddInt("reconnect-timeout", seconds,
               "seconds to keep trying to reach a coordinator that went "
               "away mid-job (it restarts: its jobs resume) before exiting "
               "3; 0 exits at once");
}

// Whether --reconnect-timeout is in range; says why not.
bool ReconnectFlagOk(const std::string& command, int64_t seconds) {
  if (seconds >= 0 && seconds <= 7 * 24 * 3600) return true;
  std::cerr << command << ": flag --reconnect-timeout: " << seconds
            << " is not in [0, 604800]\n";
  return false;
}

// `submit --watch` and `watch`: follows job `id` to its end, with the
// per-stage table at the end (not with --json), through restarts of the
// coordinator for up to `reconnect_seconds`. Ctrl-C stops the following,
// not the job, and says so and how to stop it. kWatchExitCodes.
int FollowToEnd(CoordinatorService::Stub& stub, const std::string& id,
                bool json, const std::string& command,
                int64_t reconnect_seconds) {
  ProgressPrinter printer(false, json);
  FollowCancel cancel;
  std::atomic<bool> interrupted{false};
  base::InstallShutdownHandlers();
  std::thread on_signal([&] {
    if (base::WaitForShutdownSignal() == 0) return;
    interrupted = true;
    cancel.Cancel();
  });
  FollowOptions options;
  options.reconnect_timeout = std::chrono::seconds(reconnect_seconds);
  options.cancel = &cancel;
  options.say = [&command](const std::string& line) {
    std::cerr << "\n" << command << ": " << line << "\n";
  };
  absl::StatusOr<petra::v1::Job> end = FollowJob(stub, id, printer, options);
  base::WakeShutdownWaiter();
  on_signal.join();
  if (interrupted) {
    std::cerr << "\n"
              << command << ": stopped following; " << id
              << " keeps running on the coordinator (petra watch " << id
              << " follows it again, petra cancel " << id << " stops it)\n";
    return 130;
  }
  if (!end.ok()) {
    std::cerr << command << ": " << end.status().message() << "\n";
    return absl::IsUnavailable(end.status()) ? kExitCoordinatorGone
                                             : kExitJobFailed;
  }
  if (!json && end->progress().stages_size() > 0) PrintStageTable(*end);
  return end->state() == petra::v1::JOB_STATE_SUCCEEDED ? 0 : kExitJobFailed;
}

int RunSubmit(const std::string& program,
              const std::vector<std::string>& args) {
  Connection coordinator;
  std::string from;
  bool watch = false, json = false;
  petra::v1::JobSpec overrides;
  base::FlagSet flags(
      absl::StrCat(program, " submit [--from FILE] [job flags] [--watch]"),
      "Submits a training job to the coordinator and prints its id. The spec\n"
      "is the file given with --from (JSON or text proto), with the job\n"
      "flags laid over it; the coordinator applies defaults and validates.\n"
      "Without --from (or --resume-from) the base is `petra train`'s default\n"
      "job, whose values the flags below show as their defaults, so\n"
      "`submit --epochs 1` trains it for one epoch.");
  AddCoordinatorFlag(flags, &coordinator);
  flags.AddString("from", &from, job::kJobSpecFileHelp);
  flags.AddBool("watch", &watch,
                "follow the job until it ends; then exit as `watch` does "
                "(0 succeeded, 1 failed, 3 coordinator gone)");
  flags.AddBool("json", &json,
                "print the submitted Job as one line of JSON (with --watch, "
                "then each event as a line, as watch --json)");
  int64_t reconnect_seconds = kDefaultReconnectSeconds;
  AddReconnectFlag(flags, &reconnect_seconds);
  job::AddJobFlags(flags, &overrides, DefaultTrainJob());
  const std::string command = program + " submit";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  if (!ReconnectFlagOk(command, reconnect_seconds)) return 2;
  auto stub = Connect(command, coordinator);
  if (stub == nullptr) return 2;
  // --resume-from without --from: the resumed job's own spec is the base,
  // so the flags given change only what they name (--epochs, say). Neither:
  // the embedded default job, as `petra train` (the deploy docs' first
  // command is `petra submit --epochs 1`).
  petra::v1::JobSpec base = DefaultTrainJob();  // --from replaces it
  if (const std::string& resumed = overrides.checkpoint().resume_from_job();
      !resumed.empty() && from.empty()) {
    grpc::ClientContext get_context;
    petra::v1::GetJobRequest get;
    get.set_job_id(resumed);
    petra::v1::Job earlier;
    if (grpc::Status g = stub->GetJob(&get_context, get, &earlier); !g.ok())
      return Fail(command, g, coordinator);
    base = earlier.spec();
    base.clear_name();
  }
  absl::StatusOr<petra::v1::JobSpec> assembled =
      job::AssembleJobSpec(base, from, overrides);
  if (!assembled.ok()) {
    std::cerr << command << ": " << assembled.status().message() << "\n";
    return 1;
  }
  grpc::ClientContext context;
  petra::v1::SubmitJobRequest request;
  *request.mutable_spec() = *assembled;
  petra::v1::Job job;
  grpc::Status s = stub->SubmitJob(&context, request, &job);
  if (!s.ok()) return Fail(command, s, coordinator);
  if (json) {
    std::cout << JobJson(job, false) << std::endl;
  } else {
    std::cout << job.id() << std::endl;
  }
  if (!watch) return 0;
  return FollowToEnd(*stub, job.id(), json, command, reconnect_seconds);
}

int RunWatch(const std::string& program, const std::vector<std::string>& args) {
  Connection coordinator;
  base::FlagSet flags(
      absl::StrCat(program, " watch [flags] JOB_ID"),
      absl::StrCat(
          "Follows a job until it ends: a progress bar with ETA, "
          "loss, accuracy and\nsamples/s, a line per epoch, and the "
          "per-stage table at the end (--json: every event as a "
          "line of JSON\ninstead). A coordinator that restarts mid-job is "
          "asked again until it is back\n(--reconnect-timeout) and the job "
          "followed on. ",
          kWatchExitCodes));
  AddCoordinatorFlag(flags, &coordinator);
  bool json = false;
  flags.AddBool("json", &json,
                "print each JobEvent as one line of JSON (JSON lines), the "
                "last one the final Job");
  int64_t reconnect_seconds = kDefaultReconnectSeconds;
  AddReconnectFlag(flags, &reconnect_seconds);
  const std::string command = program + " watch";
  std::string id;
  std::unique_ptr<CoordinatorService::Stub> stub;
  if (int rc = PrepareJobCommand(flags, command, args, coordinator, &id, &stub);
      rc >= 0) {
    return rc;
  }
  if (!ReconnectFlagOk(command, reconnect_seconds)) return 2;
  return FollowToEnd(*stub, id, json, command, reconnect_seconds);
}

int RunStatus(const std::string& program,
              const std::vector<std::string>& args) {
  Connection coordinator;
  bool json = false;
  std::string report;
  base::FlagSet flags(absl::StrCat(program, " status [flags] JOB_ID"),
                      "Prints a job's state and progress (or the whole Job as "
                      "JSON).");
  AddCoordinatorFlag(flags, &coordinator);
  flags.AddBool("json", &json, "print the Job message as JSON");
  flags.AddString("report", &report,
                  "also write the job's report to this file: the JSON "
                  "`petra train --report` writes, its epochs from the "
                  "job's history (`petra plot --report` draws it)");
  const std::string command = program + " status";
  std::string id;
  std::unique_ptr<CoordinatorService::Stub> stub;
  if (int rc = PrepareJobCommand(flags, command, args, coordinator, &id, &stub);
      rc >= 0) {
    return rc;
  }
  petra::v1::Job job;
  if (int rc = FetchJob(*stub, id, command, coordinator, &job); rc >= 0) {
    return rc;
  }
  if (!report.empty() && !WriteFleetReport(job, report)) {
    std::cerr << command << ": cannot write the report to " << report << ": "
              << std::strerror(errno) << "\n";
    return 1;
  }
  if (json) {
    std::cout << JobJson(job, true) << "\n";
    return 0;
  }
  PrintJobLine(job);
  if (job.has_error())
    std::printf("error: %s\n", job.error().message().c_str());
  if (!job.last_checkpoint().empty()) {
    std::printf("last checkpoint: %s\n", job.last_checkpoint().c_str());
  }
  PrintRecoveries(job);
  if (job.progress().stages_size() > 0) PrintStageTable(job);
  return 0;
}

int RunList(const std::string& program, const std::vector<std::string>& args) {
  Connection coordinator;
  std::string state;
  bool json = false;
  base::FlagSet flags(
      absl::StrCat(program, " list [flags]"),
      "Lists the coordinator's jobs, newest first (every page).");
  AddCoordinatorFlag(flags, &coordinator);
  flags.AddString("state", &state,
                  "only jobs in this state: queued, starting, running, "
                  "recovering, succeeded, failed, cancelled");
  flags.AddBool("json", &json,
                "print one JSON object, {\"jobs\": [Job, ...]}, every page "
                "joined");
  bool mine = false;
  flags.AddBool("mine", &mine,
                "only the jobs this token's user submitted (a coordinator "
                "with --users-file or --auth-token-file)");
  const std::string command = program + " list";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  petra::v1::ListJobsRequest request;
  request.set_mine(mine);
  if (!state.empty()) {
    petra::v1::JobState parsed;
    if (!petra::v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(state),
                                   &parsed) ||
        parsed == petra::v1::JOB_STATE_UNSPECIFIED) {
      std::cerr << command << ": flag --state: unknown state \"" << state
                << "\"\n";
      return 2;
    }
    request.set_state(parsed);
  }
  auto stub = Connect(command, coordinator);
  if (stub == nullptr) return 2;
  // Every page first: a failure midway prints nothing rather than part of
  // a list a script would take for the whole.
  petra::v1::ListJobsResponse all;
  do {
    grpc::ClientContext context;
    petra::v1::ListJobsResponse response;
    grpc::Status s = stub->ListJobs(&context, request, &response);
    if (!s.ok()) return Fail(command, s, coordinator);
    for (petra::v1::Job& job : *response.mutable_jobs()) {
      *all.add_jobs() = std::move(job);
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  if (json) {
    // Always the key, even for no jobs (the JSON mapping omits empty lists).
    std::cout << (all.jobs_size() == 0 ? "{\n  \"jobs\": []\n}"
                                       : JobJson(all, true))
              << "\n";
    return 0;
  }
  for (const petra::v1::Job& job : all.jobs()) PrintJobLine(job);
  if (all.jobs_size() == 0) std::printf("no jobs\n");
  return 0;
}

int RunCancel(const std::string& program,
              const std::vector<std::string>& args) {
  Connection coordinator;
  base::FlagSet flags(absl::StrCat(program, " cancel [flags] JOB_ID"),
                      "Cancels a queued or running job. A running job stops "
                      "within seconds and\nreleases its stages; its "
                      "checkpoints stay.");
  AddCoordinatorFlag(flags, &coordinator);
  bool json = false;
  flags.AddBool("json", &json, "print the Job after the request as JSON");
  const std::string command = program + " cancel";
  std::string id;
  std::unique_ptr<CoordinatorService::Stub> stub;
  if (int rc = PrepareJobCommand(flags, command, args, coordinator, &id, &stub);
      rc >= 0) {
    return rc;
  }
  grpc::ClientContext context;
  petra::v1::CancelJobRequest request;
  request.set_job_id(id);
  petra::v1::Job job;
  grpc::Status s = stub->CancelJob(&context, request, &job);
  if (!s.ok()) return Fail(command, s, coordinator);
  if (json) {
    std::cout << JobJson(job, true) << "\n";
    return 0;
  }
  std::printf("%s: %s\n", job.id().c_str(),
              job.state() == petra::v1::JOB_STATE_CANCELLED
                  ? "cancelled"
                  : "cancelling (it stops within seconds)");
  return 0;
}

int RunExport(const std::string& program,
              const std::vector<std::string>& args) {
  Connection coordinator;
  std::string output;
  base::FlagSet flags(
      absl::StrCat(program, " export [flags] JOB_ID"),
      "Downloads a job's trained weights (its newest checkpoint) as a file\n"
      "that Python reads with torch.load(path): a dict from names to\n"
      "tensors, \"blocks.<i>.<parameter or buffer>\" with i the block's index\n"
      "in the network (docs/USING.md, \"Exported weights\"); petra.models\n"
      "loads it.\n"
      "--format torchscript: a TorchScript module instead, for torch.jit.load\n"
      "with no petra code: forward(images in [0, 1]) -> logits, the input\n"
      "normalisation folded in.");
  AddCoordinatorFlag(flags, &coordinator);
  std::string format = "state_dict";
  flags.AddString(
      "output", &output,
      "file to write (default: JOB_ID.pt, or JOB_ID.torchscript.pt)");
  flags.AddString("format", &format, "state_dict or torchscript");
  bool json = false;
  flags.AddBool("json", &json,
                "print {\"job\": ..., \"path\": ..., \"bytes\": N} "
                "instead of a sentence");
  const std::string command = program + " export";
  std::string id;
  std::unique_ptr<CoordinatorService::Stub> stub;
  if (int rc = PrepareJobCommand(flags, command, args, coordinator, &id, &stub);
      rc >= 0) {
    return rc;
  }
  petra::v1::ExportJobRequest request;
  request.set_job_id(id);
  if (format == "torchscript") {
    request.set_format(petra::v1::ExportJobRequest::FORMAT_TORCHSCRIPT);
  } else if (format != "state_dict") {
    std::cerr << command << ": flag --format: \"" << format
              << "\" is not state_dict or torchscript\n";
    return 2;
  }
  if (output.empty()) {
    output = id + (format == "torchscript" ? ".torchscript.pt" : ".pt");
  }
  // Received into OUTPUT.partial, renamed when whole; errors name OUTPUT
  // (what the user asked for) and the reason.
  const std::string partial = output + ".partial";
  const auto cannot_write = [&](int error) {
    std::cerr << command << ": cannot write \"" << output
              << "\": " << std::strerror(error) << "\n";
    return 1;
  };
  errno = 0;
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) return cannot_write(errno != 0 ? errno : EIO);
  grpc::ClientContext context;
  auto reader = stub->ExportJob(&context, request);
  petra::v1::ExportChunk chunk;
  uint64_t total = 0, got = 0;
  while (reader->Read(&chunk)) {
    if (chunk.total_bytes() > 0) total = chunk.total_bytes();
    out.write(chunk.data().data(),
              static_cast<std::streamsize>(chunk.data().size()));
    got += chunk.data().size();
  }
  grpc::Status s = reader->Finish();
  errno = 0;
  out.close();
  const int write_error = !out ? (errno != 0 ? errno : EIO) : 0;
  if (!s.ok() || write_error != 0 || got != total) {
    std::remove(partial.c_str());
    if (!s.ok()) return Fail(command, s, coordinator);
    if (write_error != 0) return cannot_write(write_error);
    std::cerr << command << ": received " << got << " of " << total
              << " bytes\n";
    return 1;
  }
  if (std::rename(partial.c_str(), output.c_str()) != 0) {
    const int error = errno;
    std::remove(partial.c_str());
    return cannot_write(error);
  }
  if (json) {
    std::cout << "{\"job\": " << base::JsonString(id)
              << ", \"path\": " << base::JsonString(output)
              << ", \"bytes\": " << got << "}\n";
    return 0;
  }
  std::printf("wrote %s (%llu bytes)\n", output.c_str(),
              static_cast<unsigned long long>(got));
  return 0;
}

}  // namespace

int RunFleetCommand(const std::string& name, const std::string& program,
                    const std::vector<std::string>& args) {
  if (name == "submit") return RunSubmit(program, args);
  if (name == "watch") return RunWatch(program, args);
  if (name == "status") return RunStatus(program, args);
  if (name == "list") return RunList(program, args);
  if (name == "cancel") return RunCancel(program, args);
  if (name == "servers") return RunServers(program, args);
  if (name == "plot") return RunPlot(program, args);
  return RunExport(program, args);
}

}  // namespace petra::client

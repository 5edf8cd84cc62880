#include "client/plot_command.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/coordinator_connection.h"
#include "client/job_progress.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/base/flag_set.h"
#include "services/base/subprocess.h"

namespace petra::client {
namespace {

// A file removed when this goes out of scope.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

bool WriteFleetReport(const petra::v1::Job& job, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << FleetReportJson(job);
  out.close();
  return static_cast<bool>(out);
}

std::string FleetReportJson(const petra::v1::Job& job) {
  const std::vector<petra::v1::Progress> epochs(job.epochs().begin(),
                                                job.epochs().end());
  return ReportJson(job, epochs, job.progress().elapsed_seconds(), "fleet", "");
}

int RunPlot(const std::string& program, const std::vector<std::string>& args) {
  Connection coordinator;
  std::string report, output, python = "python3", title;
  base::FlagSet flags(
      absl::StrCat(program, " plot [flags] (JOB_ID | --report FILE)"),
      "Draws a job's loss and accuracy against optimizer steps and seconds,\n"
      "its samples/s each epoch and each stage's bubble, as one PNG: a job\n"
      "on the coordinator (its epochs' history), or a report that `petra\n"
      "train --report` or `petra status --report` wrote. Needs python3 with\n"
      "matplotlib (Debian: apt-get install python3-matplotlib).");
  AddCoordinatorFlag(flags, &coordinator);
  flags.AddString("report", &report,
                  "draw this report (JSON) instead of asking a coordinator");
  flags.AddString("output", &output,
                  "the PNG to write (default: JOB_ID.png, or the report's "
                  "name with .png)");
  flags.AddString("title", &title, "the figure's title (default: the job's)");
  flags.AddString("python", &python,
                  "the Python that draws (it needs matplotlib)");
  const std::string command = program + " plot";
  std::optional<TempFile> fetched;
  if (int rc = base::ParseCommandOrExit(flags, command, args, true); rc >= 0)
    return rc;
  if (!report.empty() && !flags.positional().empty()) {
    std::cerr << command << ": give a job id or --report FILE, not both\n";
    return 2;
  }
  if (report.empty()) {
    std::string id;
    if (int rc = TakeJobId(command, flags.positional(), &id); rc >= 0) {
      return rc;
    }
    std::unique_ptr<petra::v1::CoordinatorService::Stub> stub =
        Connect(command, coordinator);
    if (stub == nullptr) return 2;
    petra::v1::Job job;
    if (int rc = FetchJob(*stub, id, command, coordinator, &job); rc >= 0) {
      return rc;
    }
    if (job.epochs_size() == 0) {
      std::cerr << command << ": job " << id
                << " has finished no epoch yet: nothing to draw\n";
      return 1;
    }
    fetched.emplace((std::filesystem::temp_directory_path() /
                     absl::StrCat("petra-plot-", id, "-", getpid(), ".json"))
                        .string());
    if (!WriteFleetReport(job, fetched->path())) {
      std::cerr << command << ": cannot write " << fetched->path() << "\n";
      return 1;
    }
    report = fetched->path();
    if (output.empty()) output = id + ".png";
  } else if (output.empty()) {
    output = std::filesystem::path(report).replace_extension(".png").string();
  }
  std::vector<std::string> argv = {python, "-", report, "--output", output};
  if (!title.empty()) {
    argv.push_back("--title");
    argv.push_back(title);
  }
  absl::StatusOr<std::string> drawn = base::RunProgram(
      argv, PlotScript(),
      "petra plot needs python3 with matplotlib: apt-get install "
      "python3-matplotlib");
  if (!drawn.ok()) {
    std::cerr << command << ": " << drawn.status().message() << "\n";
    return 1;
  }
  std::printf("wrote %s\n", output.c_str());
  return 0;
}

}  // namespace petra::client

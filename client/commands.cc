#include "client/commands.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/health_command.h"
#include "services/model/device_check.h"
#include "services/version.h"

namespace petra::client {

int RunSpec(const std::string& program, const std::vector<std::string>& args);
int RunModelInfo(const std::string& program,
                 const std::vector<std::string>& args);
int RunTrain(const std::string& program, const std::vector<std::string>& args);
int RunGenerate(const std::string& program,
                const std::vector<std::string>& args);
int RunProfile(const std::string& program,
               const std::vector<std::string>& args);
int RunSimulate(const std::string& program,
                const std::vector<std::string>& args);
int RunFleetCommand(const std::string& name, const std::string& program,
                    const std::vector<std::string>& args);

namespace {

int RunVersion(const std::string& program,
               const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "Usage: " << program
              << " version\n\nPrints the version and "
                 "the compute backend this build can use.\n";
    return 0;
  }
  if (!args.empty()) {
    std::cerr << program << " version: unexpected argument '" << args[0]
              << "'\n";
    return 2;
  }
  std::cout << "petra " << kVersion
            << " (compute: " << model::DescribeComputeBackend() << ")\n";
  return 0;
}

template <const char* kName>
int Fleet(const std::string& program, const std::vector<std::string>& args) {
  return RunFleetCommand(kName, program, args);
}
constexpr char kSubmit[] = "submit", kWatch[] = "watch", kStatus[] = "status",
               kList[] = "list", kCancel[] = "cancel", kExport[] = "export",
               kServers[] = "servers";

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"train",
       "train a job to the end on this machine (default: RevNet18 on "
       "Fashion-MNIST)",
       &RunTrain},
      {"submit", "submit a job to a coordinator (flags or a JSON JobSpec file)",
       &Fleet<kSubmit>},
      {"watch", "follow a job: progress bar with ETA, loss, accuracy",
       &Fleet<kWatch>},
      {"status", "a job's state, progress and stages", &Fleet<kStatus>},
      {"list", "the coordinator's jobs, newest first", &Fleet<kList>},
      {"servers", "the fleet's stage servers: state, job, lease",
       &Fleet<kServers>},
      {"cancel", "cancel a queued or running job", &Fleet<kCancel>},
      {"export", "download a job's weights for Python's torch.load",
       &Fleet<kExport>},
      {"generate",
       "continue a prompt with a trained language model (its export)",
       &RunGenerate},
      {"spec", "resolve and validate a job spec from a file and/or job flags",
       &RunSpec},
      {"model-info", "parameters and stages of a network of the model zoo",
       &RunModelInfo},
      {"profile",
       "measure each stage's forward and backward time of a job on this "
       "machine",
       &RunProfile},
      {"simulate",
       "predict each pipeline schedule's throughput and memory (no training)",
       &RunSimulate},
      {"health", "check that a stage server or coordinator is serving",
       &RunHealth},
      {"version", "print the version and compute backend", &RunVersion},
  };
  return commands;
}

std::string TopLevelHelp() {
  std::string out =
      "Usage: petra COMMAND [flags]\n\n"
      "Client of a PETRA fleet: trains reversible networks split into stages\n"
      "across stage servers, with every stage running forward and backward at\n"
      "once (Parallel End-to-end Training with Reversible Architectures).\n\n"
      "Commands:\n";
  for (const Command& c : Commands()) {
    absl::StrAppend(&out, absl::StrFormat("  %-10s %s\n", c.name, c.summary));
  }
  absl::StrAppend(
      &out,
      "\nRun 'petra COMMAND --help' for a command's flags.\n"
      "Servers: petra-coordinator --help, petra-stage-server --help.\n");
  return out;
}

}  // namespace petra::client

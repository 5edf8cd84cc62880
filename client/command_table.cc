#include "client/command_table.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/health_command.h"

namespace petra::client {

int RunSpec(const std::string& program, const std::vector<std::string>& args);
int RunFleetCommand(const std::string& name, const std::string& program,
                    const std::vector<std::string>& args);

namespace {

template <const char* kName>
int Fleet(const std::string& program, const std::vector<std::string>& args) {
  return RunFleetCommand(kName, program, args);
}
constexpr char kSubmit[] = "submit", kWatch[] = "watch", kStatus[] = "status",
               kList[] = "list", kCancel[] = "cancel", kExport[] = "export",
               kServers[] = "servers", kPlot[] = "plot";

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"train",
       "train a job to the end on this machine (default: RevNet18 on "
       "Fashion-MNIST)",
       true},
      {"submit", "submit a job to a coordinator (flags or a JSON JobSpec file)",
       false},
      {"watch", "follow a job: progress bar with ETA, loss, accuracy", false},
      {"status", "a job's state, progress and stages", false},
      {"list", "the coordinator's jobs, newest first", false},
      {"servers", "the fleet's stage servers: state, job, lease", false},
      {"cancel", "cancel a queued or running job", false},
      {"export", "download a job's weights for Python's torch.load", false},
      {"plot",
       "draw a job's loss, accuracy, throughput and bubble as a PNG (python3 "
       "and matplotlib)",
       false},
      {"generate",
       "continue a prompt with a trained language model (its export)", true},
      {"spec", "resolve and validate a job spec from a file and/or job flags",
       false},
      {"model-info", "parameters and stages of a network of the model zoo",
       true},
      {"profile",
       "measure each stage's forward and backward time of a job on this "
       "machine",
       true},
      {"simulate",
       "predict each pipeline schedule's throughput and memory (no training)",
       true},
      {"health", "check that a stage server or coordinator is serving", false},
      {"version", "print the version and compute backend", true},
  };
  return commands;
}

const Command* FindCommand(std::string_view name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

CommandFn FleetCommand(std::string_view name) {
  static const std::vector<std::pair<std::string_view, CommandFn>> fleet = {
      {"submit", &Fleet<kSubmit>},
      {"watch", &Fleet<kWatch>},
      {"status", &Fleet<kStatus>},
      {"list", &Fleet<kList>},
      {"servers", &Fleet<kServers>},
      {"cancel", &Fleet<kCancel>},
      {"export", &Fleet<kExport>},
      {"plot", &Fleet<kPlot>},
      {"spec", &RunSpec},
      {"health", &RunHealth}};
  for (const auto& [n, run] : fleet) {
    if (n == name) return run;
  }
  return nullptr;
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

int RunCommandLine(int argc, char** argv,
                   int (*run_local)(const Command& command, int argc,
                                    char** argv)) {
  const std::string program = "petra";
  if (argc < 2) {
    std::cerr << TopLevelHelp();
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::cout << TopLevelHelp();
    return 0;
  }
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    std::cerr << program << ": unknown command '" << name
              << "'; run 'petra --help' for the list of commands\n";
    return 2;
  }
  if (command->local) return run_local(*command, argc, argv);
  return FleetCommand(name)(program, {argv + 2, argv + argc});
}

}  // namespace petra::client

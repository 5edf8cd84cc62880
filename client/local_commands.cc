#include "client/local_commands.h"

#include <iostream>
#include <utility>
#include <vector>

#include "services/model/device_check.h"
#include "services/version.h"

namespace petra::client {

int RunModelInfo(const std::string& program,
                 const std::vector<std::string>& args);
int RunTrain(const std::string& program, const std::vector<std::string>& args);
int RunGenerate(const std::string& program,
                const std::vector<std::string>& args);
int RunProfile(const std::string& program,
               const std::vector<std::string>& args);
int RunSimulate(const std::string& program,
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

}  // namespace

CommandFn LocalCommand(std::string_view name) {
  static const std::vector<std::pair<std::string_view, CommandFn>> local = {
      {"train", &RunTrain},          {"generate", &RunGenerate},
      {"model-info", &RunModelInfo}, {"profile", &RunProfile},
      {"simulate", &RunSimulate},    {"version", &RunVersion}};
  for (const auto& [n, run] : local) {
    if (n == name) return run;
  }
  return nullptr;
}

}  // namespace petra::client

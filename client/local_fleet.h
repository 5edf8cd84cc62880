// A whole fleet inside this process for `petra train`: J stage servers and
// a coordinator, the same classes the distributed binaries run, on loopback
// with ephemeral ports and real gRPC between them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace petra::stage_server {
class StageServer;
}
namespace petra::coordinator {
class CoordinatorServer;
}

namespace petra::client {

class LocalFleet {
 public:
  struct Options {
    int stages = 1;
    int threads_per_stage = 1;
    std::string data_root;
    // Stage servers write under <state_dir>/stage-<j>, the coordinator under
    // <state_dir>/coordinator.
    std::string state_dir;
    // state_dir outlives the fleet: the coordinator keeps trained
    // tokenizers there for later jobs.
    bool keep_cache = true;
    // Serve every process's /metrics on an ephemeral loopback port.
    bool metrics = true;
    // The device each stage server runs on (--device), one per stage; "cpu"
    // for those not listed.
    std::vector<std::string> devices;
    int data_workers = 0;  // the coordinator's --data-workers (0: per core)
  };
  static absl::StatusOr<std::unique_ptr<LocalFleet>> Start(
      const Options& options);
  ~LocalFleet();
  // Stops the coordinator (cancelling its jobs) and then every stage.
  void Stop();
  std::string coordinator_address() const;
  // The coordinator's --state-dir (its jobs' records and exports).
  std::string coordinator_state_dir() const { return coordinator_state_dir_; }
  // Ports of the /metrics endpoints: the coordinator's, then each stage's
  // (empty when metrics are off).
  std::vector<int> metrics_ports() const;

 private:
  LocalFleet() = default;
  std::vector<std::unique_ptr<stage_server::StageServer>> stages_;
  std::unique_ptr<coordinator::CoordinatorServer> coordinator_;
  std::string coordinator_state_dir_;
};

}  // namespace petra::client

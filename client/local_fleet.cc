#include "client/local_fleet.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator_server.h"
#include "stage_server/stage_server.h"

namespace petra::client {

absl::StatusOr<std::unique_ptr<LocalFleet>> LocalFleet::Start(
    const Options& options) {
  std::unique_ptr<LocalFleet> fleet(new LocalFleet());
  std::vector<std::string> addresses;
  for (int j = 0; j < options.stages; ++j) {
    stage_server::StageServer::Options o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = options.metrics ? "127.0.0.1:0" : "";
    o.device = j < static_cast<int>(options.devices.size()) ? options.devices[j]
                                                            : "cpu";
    o.threads = options.threads_per_stage;
    o.state_dir = absl::StrCat(options.state_dir, "/stage-", j);
    o.drain_seconds = 0;
    absl::StatusOr<std::unique_ptr<stage_server::StageServer>> s =
        stage_server::StageServer::Create(o);
    if (!s.ok()) return s.status();
    if (absl::Status st = (*s)->Start(); !st.ok()) return st;
    addresses.push_back(absl::StrCat("127.0.0.1:", (*s)->port()));
    fleet->stages_.push_back(std::move(*s));
  }
  coordinator::CoordinatorServer::Options o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = options.metrics ? "127.0.0.1:0" : "";
  o.stages = absl::StrJoin(addresses, ",");
  o.data_root = options.data_root;
  o.data_workers = options.data_workers;
  o.state_dir = options.state_dir + "/coordinator";
  o.cache_tokenizers = options.keep_cache;
  fleet->coordinator_state_dir_ = o.state_dir;
  absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> c =
      coordinator::CoordinatorServer::Create(o);
  if (!c.ok()) return c.status();
  if (absl::Status st = (*c)->Start(); !st.ok()) return st;
  fleet->coordinator_ = std::move(*c);
  return fleet;
}

LocalFleet::~LocalFleet() { Stop(); }

void LocalFleet::Stop() {
  if (coordinator_ != nullptr) coordinator_->GracefulStop();
  coordinator_.reset();
  for (auto& s : stages_) s->GracefulStop();
  stages_.clear();
}

std::vector<int> LocalFleet::metrics_ports() const {
  std::vector<int> ports;
  if (coordinator_ == nullptr || coordinator_->metrics_port() == 0)
    return ports;
  ports.push_back(coordinator_->metrics_port());
  for (const auto& s : stages_) ports.push_back(s->metrics_port());
  return ports;
}

std::string LocalFleet::coordinator_address() const {
  return absl::StrCat("127.0.0.1:", coordinator_->port());
}

}  // namespace petra::client

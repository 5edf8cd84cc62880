// FleetRunner's choice of a data channel for every link of every
// pipeline, from both ends' LinkEndpoint (services/link/transport_choice.h).
#include "absl/strings/str_cat.h"
#include "coordinator/fleet_runner.h"
#include "services/job/job_spec_validation.h"
#include "services/link/endpoint.h"
#include "services/link/transport_choice.h"

namespace petra::coordinator {

absl::Status FleetRunner::ChooseTransports() {
  const int stages = this->stages();
  const petra::v1::Transport wanted = spec_.transport();
  const petra::v1::LinkEndpoint& here = link::LocalEndpoint();
  for (Pipeline& p : pipelines_) {
    const StageFleet& f = *p.fleet;
    p.links.assign(stages, petra::v1::TRANSPORT_GRPC);
    // Each end on the device the job gives its stage (cuda_ipc asks).
    auto end = [&](int j) {
      petra::v1::LinkEndpoint e = f.endpoint(j);
      if (std::string d = job::RequestedDevice(spec_, j); !d.empty()) {
        e.set_device(d);
      }
      return e;
    };
    for (int j = 0; j + 1 < stages; ++j) {
      absl::StatusOr<petra::v1::Transport> t = link::ChooseTransport(
          wanted, end(j), end(j + 1),
          absl::StrCat(f.Name(j), " <-> ", f.Name(j + 1)));
      if (!t.ok()) return t.status();
      p.links[j] = *t;
    }
    for (auto [j, to] : {std::pair{0, &p.feed_to_first},
                         std::pair{stages - 1, &p.feed_to_last}}) {
      absl::StatusOr<petra::v1::Transport> t = link::ChooseFeedTransport(
          wanted, here, f.endpoint(j),
          absl::StrCat("the coordinator -> ", f.Name(j)));
      if (!t.ok()) return t.status();
      *to = *t;
    }
  }
  return absl::OkStatus();
}

}  // namespace petra::coordinator

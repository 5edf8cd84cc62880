#include "services/link/endpoint.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/link/ipc_device.h"
#include "services/link/shared_ring.h"

namespace petra::link {
namespace {

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Empty unless a ring can actually be made and read back here.
std::string ShmDomain(const std::string& host) {
  struct stat st {};
  if (host.empty() || stat("/dev/shm", &st) != 0) return "";
  auto probe = SharedRing::Create(1, 64);
  if (!probe.ok()) return "";
  return absl::StrCat(host, ":", st.st_dev, ":", st.st_ino);
}

// What PETRA_TRANSPORTS lets this process offer (both when it is unset).
struct Offer {
  bool grpc = true, shm = true, grpc_bulk = true, cuda_ipc = true;
};

absl::StatusOr<Offer> ReadTransportsEnvironment() {
  const char* only = std::getenv("PETRA_TRANSPORTS");
  if (only == nullptr || *only == '\0') return Offer();
  Offer offer{false, false, false, false};
  for (absl::string_view t : absl::StrSplit(only, ',')) {
    if (t != "grpc" && t != "shm" && t != "grpc_bulk" && t != "cuda_ipc") {
      return absl::InvalidArgumentError(absl::StrCat(
          "PETRA_TRANSPORTS=\"", only, "\": \"", t,
          "\" is not a transport; use a list of grpc, grpc_bulk, shm and "
          "cuda_ipc"));
    }
    offer.grpc |= t == "grpc";
    offer.shm |= t == "shm";
    offer.grpc_bulk |= t == "grpc_bulk";
    offer.cuda_ipc |= t == "cuda_ipc";
  }
  return offer;
}

petra::v1::LinkEndpoint Make() {
  petra::v1::LinkEndpoint e;
  e.set_host_id(BootId());
  // Servers refuse a bad value at start (CheckTransportsEnvironment); any
  // other process offers only gRPC then.
  const Offer offer =
      ReadTransportsEnvironment().value_or(Offer{true, false, false, false});
  if (offer.shm) e.set_shm_domain(ShmDomain(e.host_id()));
  if (offer.grpc) e.add_transports(petra::v1::TRANSPORT_GRPC);
  if (!e.shm_domain().empty()) e.add_transports(petra::v1::TRANSPORT_SHM);
  if (offer.grpc_bulk) e.add_transports(petra::v1::TRANSPORT_GRPC_BULK);
  // Its rings' slot states are in /dev/shm: cuda_ipc needs shm too.
  if (offer.cuda_ipc && !e.shm_domain().empty() && CudaIpcDevice() != nullptr) {
    e.add_transports(petra::v1::TRANSPORT_CUDA_IPC);
    for (const GpuIdentity& g : VisibleGpus()) {
      petra::v1::GpuIdentity* out = e.add_gpus();
      out->set_uuid(g.uuid);
      for (const std::string& p : g.peers) out->add_peers(p);
    }
  }
  return e;
}

}  // namespace

absl::Status CheckTransportsEnvironment() {
  return ReadTransportsEnvironment().status();
}

const petra::v1::LinkEndpoint& LocalEndpoint() {
  static const petra::v1::LinkEndpoint* const endpoint =
      new petra::v1::LinkEndpoint(Make());
  return *endpoint;
}

}  // namespace petra::link

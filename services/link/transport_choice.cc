#include "services/link/transport_choice.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace petra::link {
namespace {

bool Offers(const petra::v1::LinkEndpoint& e, petra::v1::Transport t) {
  return std::find(e.transports().begin(), e.transports().end(), t) !=
         e.transports().end();
}

// Empty when both ends can share memory; otherwise why not.
std::string NoSharedMemory(const petra::v1::LinkEndpoint& sender,
                           const petra::v1::LinkEndpoint& receiver) {
  if (!Offers(sender, petra::v1::TRANSPORT_SHM) ||
      !Offers(receiver, petra::v1::TRANSPORT_SHM)) {
    return absl::StrCat(
        Offers(sender, petra::v1::TRANSPORT_SHM) ? "the receiver"
                                                 : "the sender",
        " has no usable /dev/shm (or PETRA_TRANSPORTS leaves shm out)");
  }
  if (sender.host_id() != receiver.host_id()) {
    return "the two ends run on different hosts";
  }
  if (sender.shm_domain() != receiver.shm_domain()) {
    return "the two ends see different /dev/shm (separate containers: give "
           "them a shared IPC namespace or /dev/shm, docs/DEPLOY.md)";
  }
  return "";
}

// The CUDA device index a device string names ("cuda" is 0), or -1.
int CudaIndex(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0) return -1;
  int index = -1;
  if (!absl::SimpleAtoi(device.substr(5), &index) || index < 0) return -1;
  return index;
}

// Empty when the receiver's GPU can read the sender's ring in place;
// otherwise why not.
std::string NoCudaIpc(const petra::v1::LinkEndpoint& sender,
                      const petra::v1::LinkEndpoint& receiver,
                      const std::string& shm_missing) {
  if (!Offers(sender, petra::v1::TRANSPORT_CUDA_IPC) ||
      !Offers(receiver, petra::v1::TRANSPORT_CUDA_IPC)) {
    return absl::StrCat(
        Offers(sender, petra::v1::TRANSPORT_CUDA_IPC) ? "the receiver"
                                                      : "the sender",
        " does not offer it (a build without CUDA, no GPU visible, or "
        "PETRA_TRANSPORTS leaves it out)");
  }
  // The slot states live in shared memory.
  if (!shm_missing.empty()) return shm_missing;
  const int from = CudaIndex(sender.device());
  const int to = CudaIndex(receiver.device());
  if (from < 0 || to < 0) {
    return absl::StrCat(from < 0 ? "the sender" : "the receiver", " runs on ",
                        from < 0 ? sender.device() : receiver.device(),
                        ", not on a GPU");
  }
  if (from >= sender.gpus_size() || to >= receiver.gpus_size()) {
    return absl::StrCat(
        from >= sender.gpus_size() ? "the sender" : "the receiver",
        " does not see cuda:", from >= sender.gpus_size() ? from : to);
  }
  const petra::v1::GpuIdentity& a = sender.gpus(from);
  const std::string& b = receiver.gpus(to).uuid();
  if (a.uuid() == b ||
      std::find(a.peers().begin(), a.peers().end(), b) != a.peers().end()) {
    return "";
  }
  return absl::StrCat("the GPUs (", sender.device(), " and ", receiver.device(),
                      ") cannot map each other's memory (no peer access)");
}

}  // namespace

std::string TransportName(petra::v1::Transport t) {
  switch (t) {
    case petra::v1::TRANSPORT_GRPC:
      return "grpc";
    case petra::v1::TRANSPORT_SHM:
      return "shm";
    case petra::v1::TRANSPORT_CUDA_IPC:
      return "cuda_ipc";
    case petra::v1::TRANSPORT_GRPC_BULK:
      return "grpc_bulk";
    default:
      return "auto";
  }
}

absl::StatusOr<petra::v1::Transport> ChooseTransport(
    petra::v1::Transport wanted, const petra::v1::LinkEndpoint& sender,
    const petra::v1::LinkEndpoint& receiver, const std::string& link) {
  const std::string shm_missing = NoSharedMemory(sender, receiver);
  const std::string bulk_missing =
      !Offers(sender, petra::v1::TRANSPORT_GRPC_BULK)
          ? "the sender does not offer it (PETRA_TRANSPORTS?)"
      : !Offers(receiver, petra::v1::TRANSPORT_GRPC_BULK)
          ? "the receiver does not offer it (PETRA_TRANSPORTS, or a server "
            "older than grpc_bulk)"
          : "";
  const std::string ipc_missing = NoCudaIpc(sender, receiver, shm_missing);
  switch (wanted) {
    case petra::v1::TRANSPORT_UNSPECIFIED:
    case petra::v1::TRANSPORT_AUTO:
      if (ipc_missing.empty()) return petra::v1::TRANSPORT_CUDA_IPC;
      if (shm_missing.empty()) return petra::v1::TRANSPORT_SHM;
      if (bulk_missing.empty()) return petra::v1::TRANSPORT_GRPC_BULK;
      return petra::v1::TRANSPORT_GRPC;
    case petra::v1::TRANSPORT_GRPC:
      return petra::v1::TRANSPORT_GRPC;
    case petra::v1::TRANSPORT_GRPC_BULK:
      if (bulk_missing.empty()) return petra::v1::TRANSPORT_GRPC_BULK;
      return absl::FailedPreconditionError(
          absl::StrCat("transport grpc_bulk: ", link, ": ", bulk_missing));
    case petra::v1::TRANSPORT_SHM:
      if (shm_missing.empty()) return petra::v1::TRANSPORT_SHM;
      return absl::FailedPreconditionError(absl::StrCat(
          "transport shm: ", link, " cannot share memory: ", shm_missing,
          " (transport auto uses gRPC for such links)"));
    case petra::v1::TRANSPORT_CUDA_IPC:
      if (ipc_missing.empty()) return petra::v1::TRANSPORT_CUDA_IPC;
      return absl::FailedPreconditionError(
          absl::StrCat("transport cuda_ipc: ", link, ": ", ipc_missing,
                       " (transport auto uses shm or gRPC for such links)"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("transport ", static_cast<int>(wanted), " is unknown"));
  }
}

absl::StatusOr<petra::v1::Transport> ChooseFeedTransport(
    petra::v1::Transport wanted, const petra::v1::LinkEndpoint& coordinator,
    const petra::v1::LinkEndpoint& stage, const std::string& link) {
  petra::v1::LinkEndpoint sender = coordinator;
  auto* offered = sender.mutable_transports();
  for (petra::v1::Transport own :
       {petra::v1::TRANSPORT_GRPC_BULK, petra::v1::TRANSPORT_CUDA_IPC}) {
    offered->erase(std::remove(offered->begin(), offered->end(), own),
                   offered->end());
  }
  // Its inputs are built on the host: cuda_ipc's link into the first stage
  // is shared memory, as grpc_bulk's is the messages.
  if (wanted == petra::v1::TRANSPORT_CUDA_IPC) {
    wanted = petra::v1::TRANSPORT_AUTO;
  }
  return ChooseTransport(wanted == petra::v1::TRANSPORT_GRPC_BULK
                             ? petra::v1::TRANSPORT_GRPC
                             : wanted,
                         sender, stage, link);
}

}  // namespace petra::link

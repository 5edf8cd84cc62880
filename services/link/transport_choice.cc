#include "services/link/transport_choice.h"

#include <algorithm>

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
  switch (wanted) {
    case petra::v1::TRANSPORT_UNSPECIFIED:
    case petra::v1::TRANSPORT_AUTO:
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
      return absl::UnimplementedError(
          absl::StrCat("transport cuda_ipc: not built yet (", link,
                       "); use auto, shm or grpc"));
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
  offered->erase(std::remove(offered->begin(), offered->end(),
                             petra::v1::TRANSPORT_GRPC_BULK),
                 offered->end());
  return ChooseTransport(wanted == petra::v1::TRANSPORT_GRPC_BULK
                             ? petra::v1::TRANSPORT_GRPC
                             : wanted,
                         sender, stage, link);
}

}  // namespace petra::link

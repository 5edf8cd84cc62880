#include "stage_server/stage_server.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/link/bulk_inbox.h"
#include "services/link/channel_factory.h"
#include "services/link/shared_ring.h"
#include "services/model/device_check.h"
#include "services/wire/grpc_defaults.h"
#include "stage_server/fleet_registration.h"
#include "stage_server/receive_budget.h"
#include "stage_server/stage_host.h"
#include "stage_server/stage_metrics.h"
#include "stage_server/stage_service.h"

namespace petra::stage_server {

// More intra-op threads than this is a typo, not a machine.
constexpr int64_t kMaxThreads = 1024;

StageServer::StageServer(Options options,
                         std::unique_ptr<server::ServerFrame> frame)
    : frame_(std::move(frame)), options_(std::move(options)) {}
StageServer::~StageServer() { GracefulStop(); }

absl::StatusOr<std::unique_ptr<StageServer>> StageServer::Create(
    Options options) {
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads: ", options.threads, " is not in [1, ", kMaxThreads, "]"));
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{"--max-stream-bytes",
                                        options.max_stream_bytes},
        {"--max-receive-bytes", options.max_receive_bytes}}) {
    if (value < (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": ", value,
          " is less than 1 MiB (1048576): no micro-batch of a real job "
          "would pass"));
    }
  }
  if (options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory-limit-bytes: ", options.memory_limit_bytes,
                     " is negative (0 uses the device's own)"));
  }
  if (options.drain_seconds < 0 || options.drain_seconds > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--drain-seconds: ", options.drain_seconds, " is not in [0, 86400]"));
  }
  if (absl::Status s = model::CheckDeviceAvailable(options.device, "--device");
      !s.ok()) {
    return s;
  }
  if (!options.coordinator.empty()) {
    if (absl::Status s =
            wire::ValidateAddress(options.coordinator, "--coordinator", false);
        !s.ok()) {
      return s;
    }
  }
  if (!options.advertise_address.empty()) {
    if (options.coordinator.empty()) {
      return absl::InvalidArgumentError(
          "--advertise-address without --coordinator: only a server that "
          "registers advertises an address");
    }
    absl::StatusOr<std::string> a =
        AdvertisedAddress(options.advertise_address, "", 1, "");
    if (!a.ok()) return a.status();
  }
  absl::StatusOr<std::unique_ptr<server::ServerFrame>> frame =
      server::ServerFrame::Create(options, "--coordinator-identity",
                                  options.coordinator_identity);
  if (!frame.ok()) return frame.status();
  return std::unique_ptr<StageServer>(
      new StageServer(std::move(options), std::move(*frame)));
}

absl::Status StageServer::Start() {
  if (frame_->serving()) {
    return absl::FailedPreconditionError("stage server already started");
  }
  if (absl::Status s = frame_->StartMetrics("stage_server"); !s.ok()) return s;
  stage_metrics_ = std::make_unique<StageMetrics>(frame_->registry());
  // Shared-memory rings left by servers of this host that died holding them
  // (their names; the memory goes with the last mapping).
  if (const int swept = link::SweepOrphanRings(); swept > 0) {
    PETRA_LOG_EVENT(kInfo, "orphan_rings_swept",
                    {"count", absl::StrCat(swept)});
  }
  host_ = std::make_unique<StageHost>(StageHost::Options{
      options_.device, static_cast<int>(options_.threads), options_.state_dir,
      stage_metrics_.get(), frame_->security(), options_.memory_limit_bytes});
  budget_ = std::make_unique<ReceiveBudget>(
      static_cast<uint64_t>(options_.max_receive_bytes),
      static_cast<uint64_t>(options_.max_stream_bytes));
  service_ = std::make_unique<StageServiceImpl>(
      host_.get(), options_.coordinator_identity, frame_->fleet_token(),
      budget_.get());
  link::BulkInbox::Global().SetMaxHeldBytes(
      static_cast<uint64_t>(options_.max_receive_bytes));
  channels_ = std::make_unique<link::ChannelServices>(
      [host = host_.get(),
       metrics = stage_metrics_.get()](const std::string& data_key) {
        absl::Status s = host->AdmitData(data_key);
        if (!s.ok()) {
          metrics->DataRefused("bulk", "unauthenticated");
          metrics->Error(s.code());
        }
        return s;
      });
  std::vector<grpc::Service*> services = channels_->services();
  services.insert(services.begin(), service_.get());
  if (absl::Status s = frame_->StartServing(services); !s.ok()) return s;
  if (!options_.coordinator.empty()) {
    registration_ =
        std::make_unique<FleetRegistration>(FleetRegistration::Options{
            options_.coordinator, options_.advertise_address, options_.listen,
            frame_->port(), frame_->security(), frame_->fleet_token()});
  }
  return absl::OkStatus();
}

void StageServer::GracefulStop() {
  if (!frame_->serving()) return;
  frame_->StopAdvertising();
  // Out of the fleet first: no placement picks a server that is going.
  if (registration_ != nullptr) registration_->Leave();
  host_->Drain(std::chrono::seconds(options_.drain_seconds));
  frame_->StopServing();
  service_.reset();
  host_.reset();
  stage_metrics_.reset();
  frame_->StopMetrics();
}

}  // namespace petra::stage_server

// The one job a stage server holds: its assignment, worker, mailbox and
// state. Shared by the host (lifecycle), the neighbour links (passes) and
// the checkpoint I/O.
#pragma once

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "petra/v1/stage.pb.h"
#include "services/base/durable_file.h"
#include "services/engine/device_transfer.h"
#include "services/engine/replica_group.h"
#include "services/engine/stage_worker.h"
#include "services/schedule/training_mode.h"
#include "stage_server/stage_mailbox.h"

namespace petra::stage_server {

// Micro-batches of under 32 samples whose credits the mailbox gathers
// before it sends them, when max_in_flight is unset: up to 8, so that a
// stream's credit replies cost about what they cost at 32 samples.
inline uint32_t CreditBatch(const petra::v1::AssignRequest& a) {
  if (a.spec().training().max_in_flight() > 0) return 1;
  const uint32_t b =
      std::max<uint32_t>(1, a.spec().training().micro_batch_size());
  return std::min<uint32_t>(8, (32 + b - 1) / b);
}

// Credits each incoming stream of the job is granted: max_in_flight, or
// the pipeline's natural depth, 2 * stage_count micro-batches, times the
// credit batch (the stream keeps 2 * stage_count in flight between two
// credit replies; at most 2 * stage_count * 32 samples, as at 32), and at
// least a flush's micro-batches (GPipe's last stage sends every backward
// of a flush before the stage below takes the first).
inline uint32_t CreditWindow(const petra::v1::AssignRequest& a) {
  const uint32_t w = a.spec().training().max_in_flight();
  if (w > 0) return w;
  return std::max<uint32_t>(
      2 * a.stage_count() * CreditBatch(a),
      static_cast<uint32_t>(std::min<int64_t>(
          schedule::PlanMode(a.spec().training()).group, UINT32_MAX)));
}

// A checkpoint being uploaded in pieces (RestoreCheckpoint), written to
// the server's disk as they come: a restore holds no copy of the file.
// Touched on the host's I/O thread only.
struct RestoreUpload {
  std::filesystem::path path;  // where the file appears whole
  std::unique_ptr<base::AtomicFile> file;
  uint64_t total = 0;
};

struct StageJob {
  // `device`: the server's (--device), where the stage runs.
  StageJob(const petra::v1::AssignRequest& a, const std::string& device)
      : assign(a),
        transfer(c10::Device(device), static_cast<int>(a.stage_index())),
        mailbox(a.stage_index(), a.stage_count(), CreditWindow(a),
                schedule::PlanMode(a.spec().training()).traffic,
                CreditBatch(a)) {}
  const petra::v1::AssignRequest assign;
  // Payloads between the host and the stage's device (a no-op on the CPU).
  const engine::DeviceTransfer transfer;
  // With replicas: this stage's group, which the worker averages in (set by
  // the executor before the worker; released after it).
  std::unique_ptr<engine::GradientAverager> replicas;
  std::unique_ptr<engine::StageWorker> worker;  // set by the executor
  StageMailbox mailbox;
  // Guarded by StageHost::mu_.
  petra::v1::StageStatus::State state = petra::v1::StageStatus::STATE_ASSIGNED;
  absl::Status error;
  petra::v1::StageStats stats;
  RestoreUpload upload;
  std::atomic<bool> released{false};
  // Aborts the outgoing streams of the running pass.
  std::mutex streams_mu;
  std::function<void()> cancel_streams;

  const std::string& id() const { return assign.job_id(); }
  int index() const { return static_cast<int>(assign.stage_index()); }
  int count() const { return static_cast<int>(assign.stage_count()); }
  void CancelStreams() {
    std::lock_guard<std::mutex> lock(streams_mu);
    if (cancel_streams) cancel_streams();
  }
};

}  // namespace petra::stage_server

// What a stage server holds, and the job's lifecycle on it: at most one job
// (stage_job.h) from Assign to Release, its passes, and the status the
// coordinator polls. The executor thread runs every piece of torch work in
// order (assignment, passes, checkpoints, release); an I/O thread reads
// checkpoint files. A pass's streams to the neighbours are
// neighbor_links.h's, checkpoint files stage_checkpoints.h's. The gRPC
// service is a thin adapter over this; reactions hand work here and never
// wait for it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "petra/v1/stage.pb.h"
#include "services/engine/serial_executor.h"
#include "services/model/device_memory.h"
#include "services/model/partition.h"
#include "services/wire/transport_security.h"
#include "stage_server/stage_checkpoints.h"
#include "stage_server/stage_mailbox.h"
#include "stage_server/stage_metrics.h"

namespace petra::stage_server {

class StageHost {
 public:
  struct Options {
    std::string device = "cpu";
    int threads = 1;
    std::string state_dir;
    // Where the stage's metrics go; none when null.
    StageMetrics* metrics = nullptr;
    // How the streams to the neighbours are secured (the server's own).
    wire::TransportSecurity security;
    // What a stage may use (0: the device's own, model::ReadMemoryCapacity).
    int64_t memory_limit_bytes = 0;
  };
  using Done = std::function<void(absl::Status)>;

  explicit StageHost(Options options);
  ~StageHost();

  // Control calls. `done` runs on the executor when the work is finished.
  void Assign(const petra::v1::AssignRequest& request,
              petra::v1::AssignResponse* response, Done done);
  absl::Status Start(const petra::v1::StartRequest& request);
  void Checkpoint(const petra::v1::CheckpointRequest& request,
                  petra::v1::CheckpointResponse* response, Done done);
  void ReadCheckpoint(const petra::v1::ReadCheckpointRequest& request,
                      petra::v1::ReadCheckpointResponse* response, Done done);
  void RestoreCheckpoint(const petra::v1::RestoreCheckpointRequest& request,
                         petra::v1::RestoreCheckpointResponse* response,
                         Done done);
  void Release(const petra::v1::ReleaseRequest& request, Done done);
  // OK when stage `stage` of `ranges` fits in the memory this server has
  // (the estimate of engine/memory_estimate.h); else RESOURCE_EXHAUSTED
  // with both numbers and what to change.
  absl::Status CheckFits(const petra::v1::JobSpec& spec,
                         const std::vector<model::BlockRange>& ranges,
                         int stage);
  petra::v1::StageStatus Status();
  // What a stage may use here: --memory-limit-bytes, else the device's.
  const model::MemoryCapacity& Capacity();

  // Whether a data stream presenting `data_key` may bring micro-batches:
  // OK for the held job's key (compared in constant time), else
  // UNAUTHENTICATED saying why. Asked when a stream opens and again for
  // each message, before anything of it is kept.
  absl::Status AdmitData(const std::string& data_key);
  // Data plane, from the stream reactors: NOT_FOUND for another job.
  absl::Status Deliver(model::ForwardBatch payload,
                       std::shared_ptr<ReplySink> from);
  absl::Status Deliver(model::BackwardBatch payload,
                       std::shared_ptr<ReplySink> from);
  // Credits a new incoming stream is granted.
  uint32_t window();
  // The CUDA device the held job's stage runs on (-1: the CPU, or no job):
  // where a stream's cuda_ipc receive buffers go.
  int cuda_device();
  StageMetrics& metrics() { return *metrics_; }

  // SIGTERM: refuses new jobs and passes, waits up to `timeout` for the
  // passes already started to end, then releases the job.
  void Drain(std::chrono::milliseconds timeout);

 private:
  void Post(std::function<void()> task);
  void RunPass(std::shared_ptr<StageJob> job, PassInfo pass);
  void Fail(StageJob& job, const absl::Status& error);
  // Stops the held job's work: closes its mailbox and aborts its streams.
  void AbandonJob(const std::string& why);
  // The held job if it is `id`; NOT_FOUND naming both otherwise. With mu_
  // held.
  std::shared_ptr<StageJob> CurrentJob(const std::string& id,
                                       absl::Status* error);
  // The same, taking mu_.
  absl::StatusOr<std::shared_ptr<StageJob>> FindJob(const std::string& id);
  // Deliver, either way.
  template <typename Batch>
  absl::Status DeliverBatch(Batch payload, std::shared_ptr<ReplySink> from);

  const Options options_;
  StageMetrics no_metrics_{nullptr};
  StageMetrics* const metrics_;
  std::once_flag capacity_once_;
  model::MemoryCapacity capacity_;
  std::mutex mu_;
  std::shared_ptr<StageJob> job_;
  bool draining_ = false;
  std::atomic<int> pending_passes_{0};
  const StageCheckpoints checkpoints_;
  std::unique_ptr<engine::SerialExecutor> executor_;
  std::unique_ptr<engine::SerialExecutor> io_;
};

}  // namespace petra::stage_server

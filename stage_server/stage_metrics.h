// The stage server's Prometheus metrics, all in this one place: names, help,
// labels and buckets. Labels are bounded: the stage's index in its job, the
// direction (forward, backward), the memory kind, the gRPC code, the
// replica (below the job's replica count). Without a
// registry (metrics off) every call does nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "petra/v1/common.pb.h"

namespace prometheus {
class Registry;
}

namespace petra::stage_server {

class StageMetrics {
 public:
  explicit StageMetrics(prometheus::Registry* registry);
  ~StageMetrics();

  // A micro-batch computed by stage `stage` in `direction`.
  void Computed(int stage, bool backward, int64_t samples, double seconds);
  // Delay (ticks) and staleness (optimizer steps) of one backward.
  void Staleness(int stage, int64_t delay_ticks, int64_t staleness_steps);
  // Seconds of a training pass the executor waited for its next
  // operation's input (the pipeline's bubble), or spent handing an output
  // on.
  void Idle(int stage, double seconds);
  void Sending(int stage, double seconds);
  void State(int stage, int64_t in_flight, int64_t optimizer_steps,
             const petra::v1::MemoryBreakdown& memory);
  // The optimizer: the rate of the stage's next step (the job's schedule
  // times the stage's delay factor), the steps it clipped so far in its job
  // and the last step's gradient norm before clipping (0: clipping off).
  void Optimizer(int stage, double learning_rate, int64_t clipped_steps,
                 double gradient_norm);
  // The most steps a micro-batch can be stale on this stage (the alert
  // PetraStalenessAboveBound compares the staleness with it).
  void StalenessBound(int stage, int64_t steps);
  // A gradient check's figures: `reference` "delayed" (the exact delayed
  // gradient, --grad-diagnostics) or "end_to_end" (--e2e-diagnostics).
  void Diagnostic(int stage, const char* reference, double cosine_similarity,
                  double norm_ratio);
  // The stage's replica (0 without replicas) and, in its job so far, the
  // all-reduce's seconds and bytes and the passes after which its replicas
  // held different weights.
  void Replicas(int stage, int replica, double allreduce_seconds,
                int64_t allreduce_bytes, int64_t mismatches);
  // The rebuild's measured error (training.rebuild_error_every): the mean
  // and largest ||x - rebuilt x|| / ||x|| so far.
  void RebuildError(int stage, double mean, double max);
  // Stream payload: `backward` selects the Backward stream; `transport`
  // the data channel the tensors went through ("grpc", "shm").
  void Sent(bool backward, const char* transport, int64_t bytes);
  void Received(bool backward, int64_t bytes);
  // An error sent back for a message or returned by an RPC.
  void Error(absl::StatusCode code);
  // A data stream or message refused before any of it was kept: `stream`
  // "forward", "backward" or "bulk"; `reason` "unauthenticated" (its data
  // key) or "over_limit" (bytes in flight).
  void DataRefused(const char* stream, const char* reason);
  // The stage no longer holds a job: its per-stage gauges go to zero.
  void Released(int stage);

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

}  // namespace petra::stage_server

// Data-parallel replicas of a pipeline (JobSpec.replicas): the R copies of
// one stage average their gradients before every optimizer step, so that
// every copy applies the same update and keeps the same weights. The
// collective comes from torch's c10d (ProcessGroupGloo on CPUs), never a
// home-made all-reduce. c10d stays inside replica_group.cc: this header
// names no torch type beyond at::Tensor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace at {
class Tensor;
}  // namespace at

namespace petra::engine {

class GradientAverager {
 public:
  virtual ~GradientAverager() = default;
  // Replaces each of `tensors` by its mean over the replicas, in place.
  // Every replica calls it with tensors of the same shapes and dtypes, in
  // the same order. Throws c10::Error when the group fails or a replica
  // does not come within the group's timeout (its callers run under
  // Guard, torch_guard.h).
  virtual void Average(const std::vector<at::Tensor>& tensors) = 0;
  // Whether every replica passed the same `value` (a checksum of its
  // weights). A collective like Average: every replica calls it.
  virtual bool Agree(int64_t value) = 0;
  virtual int replicas() const = 0;
  virtual int rank() const = 0;
  // Time spent in Average and the bytes each call reduced, so far.
  virtual double seconds() const = 0;
  virtual int64_t bytes() const = 0;
};

// Where the replicas of a job meet: a c10d TCPStore (the coordinator hosts
// one per job). Unauthenticated, as torch's is: reach it only over the
// fleet's own network (docs/DEPLOY.md).
class ReplicaStore {
 public:
  // Listens at `port` (0: an ephemeral one) on every interface; `host` is
  // where this process connects to it itself.
  static absl::StatusOr<std::unique_ptr<ReplicaStore>> Start(
      const std::string& host, int port, std::chrono::milliseconds timeout);
  virtual ~ReplicaStore() = default;
  virtual int port() const = 0;
};

// Rank `rank` of `replicas` in group `group` (one group per stage, e.g.
// "stage-1"), met through the store at host:port; its Gloo connections
// listen on `local_host`. Blocks until every rank has joined, at most
// `timeout`.
absl::StatusOr<std::unique_ptr<GradientAverager>> JoinReplicaGroup(
    const std::string& store_host, int store_port, const std::string& group,
    int rank, int replicas, const std::string& local_host,
    std::chrono::milliseconds timeout);

// The R ranks of one group inside this process (the in-process runner's
// replicas of one stage), joined through an in-memory store on loopback
// Gloo connections. Element r is rank r's. `timeout`: how long a
// collective waits for every rank before it fails.
absl::StatusOr<std::vector<std::unique_ptr<GradientAverager>>>
MakeLocalReplicaGroup(int replicas, std::chrono::milliseconds timeout);

}  // namespace petra::engine

// The stage servers of one job, driven through StageClient: which servers
// answer and are free (probe), assigning the job's layer ranges, starting
// passes, polling their status, moving checkpoints in and out, and releasing
// them. Errors name the stage ("stage 1 (host:port): ..."). No gRPC here:
// the connector decides how a stage is reached.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/fleet_members.h"
#include "coordinator/stage_client.h"
#include "petra/v1/coordinator.pb.h"
#include "petra/v1/stage.pb.h"

namespace petra::coordinator {

// `s` with `prefix` before its message, its code kept.
absl::Status Prefixed(const std::string& prefix, const absl::Status& s);

// One round of asking servers whether they can take a job.
struct ProbeResult {
  std::vector<std::string> chosen;  // every free server, in listed order
  std::vector<std::string> held;    // the job each chosen server still holds
  // How each chosen server's data channels can be reached.
  std::vector<petra::v1::LinkEndpoint> endpoints;
  // What a stage may use on each chosen server (0: unknown), and whence.
  std::vector<int64_t> memory_bytes;
  std::vector<std::string> memory_sources;
  std::vector<std::string> missing;  // why each passed-over server was

  // Keeps the chosen servers at `indices`, in that order.
  void Keep(const std::vector<int>& indices);
};

// Servers that might take a job, asked again each round while a recovery
// waits.
class ServerProbe {
 public:
  ServerProbe(std::vector<std::string> candidates,
              const StageConnector& connect);
  // Asks every candidate, in order, whether it is free (placement chooses
  // among them by memory and host). A server that still holds a job is
  // taken too: the candidates leave out what other running jobs claim
  // (server_claims.h), so that job is this one's or left over from before
  // a restart (it is released, once this job has claimed the server,
  // rather than waited for forever).
  ProbeResult Round();

 private:
  std::vector<std::string> candidates_;
  std::vector<std::unique_ptr<StageClient>> clients_;
};

// The members as `petra servers` lists them, each asked for its status (in
// parallel, each with the client's short deadline).
petra::v1::ListServersResponse DescribeFleet(
    const std::vector<FleetMembers::Member>& members,
    const StageConnector& connect);

class StageFleet {
 public:
  // `endpoints`: each server's, as its status gave it (none: unknown, and
  // every link then uses gRPC).
  StageFleet(std::string job_id, std::vector<std::string> addresses,
             const StageConnector& connect,
             std::vector<petra::v1::LinkEndpoint> endpoints = {});

  int size() const { return static_cast<int>(addresses_.size()); }
  const std::string& address(int j) const { return addresses_[j]; }
  petra::v1::LinkEndpoint endpoint(int j) const {
    return j < static_cast<int>(endpoints_.size()) ? endpoints_[j]
                                                   : petra::v1::LinkEndpoint();
  }
  // "stage j (address)".
  std::string Name(int j) const;
  StageClient& client(int j) { return *clients_[j]; }
  // The key stage j's data streams must present (AssignRequest.data_key):
  // drawn for each stage when the fleet is made, which is once an attempt,
  // so a recovered job's keys are new.
  const std::string& data_key(int j) const { return data_keys_[j]; }

  // Releases jobs the servers still hold from before (`held`, "" for none).
  absl::Status ReleaseStale(const std::vector<std::string>& held);
  // Assigns stage j; returns the server's answer.
  absl::StatusOr<petra::v1::AssignResponse> Assign(
      int j, const petra::v1::AssignRequest& request);
  // Starts a pass on every stage.
  absl::Status Start(petra::v1::Phase phase, uint32_t epoch, int64_t n);
  // Every stage's statistics; an error when one is gone, failed or no longer
  // holds the job. `busy`, when given, is set when a stage still runs a
  // pass (StageStatus.passes_running).
  absl::StatusOr<std::vector<petra::v1::StageStats>> Poll(bool* busy = nullptr);
  // Whether `failure` came from losing a stage server (crashed, restarted or
  // unreachable) rather than from the job itself.
  bool LostAStage(const absl::Status& failure);
  // Best effort: a stage that is gone holds nothing.
  void ReleaseAll();

  // Has stage j write its checkpoint `request.name()` on its own disk.
  absl::StatusOr<petra::v1::CheckpointResponse> WriteCheckpoint(
      int j, const petra::v1::CheckpointRequest& request);
  // Copies the checkpoint stage j wrote into `file` piece by piece
  // (appearing whole or not at all), checked against the size and SHA-256
  // the stage reported. Returns that SHA-256.
  absl::StatusOr<std::string> PullCheckpoint(
      int j, const petra::v1::CheckpointResponse& written,
      const std::filesystem::path& file);
  // Uploads checkpoint `file` to stage j piece by piece; the stage's answer.
  absl::StatusOr<petra::v1::RestoreCheckpointResponse> PushCheckpoint(
      int j, const std::filesystem::path& file);

  // A control call's error with the stage's name.
  absl::Status Named(int j, const absl::Status& s) const;

  // Runs call(j) for every stage at once, each on a thread of its own, and
  // returns the first error in stage order. What takes seconds on every
  // stage (building its blocks at Assign, writing a checkpoint) then takes
  // the slowest stage's time, not the sum: 23 s became 2 s for the assigns
  // of a 12-stage RevViT of 277M parameters. `at_most` > 0: that many
  // threads, each taking the next stage, for what costs the coordinator
  // memory per call (moving checkpoints).
  static absl::Status ForEach(int stages,
                              const std::function<absl::Status(int)>& call,
                              int at_most = 0);

 private:
  std::string job_id_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<StageClient>> clients_;
  std::vector<petra::v1::LinkEndpoint> endpoints_;
  std::vector<std::string> data_keys_;
};

}  // namespace petra::coordinator

#include "coordinator/fleet_control.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/base/secret_key.h"
#include "services/base/timestamp.h"
#include "services/wire/status_map.h"

namespace petra::coordinator {
namespace {

// Checkpoints move in pieces of this size: each transfer holds a piece in
// a few copies at once (gRPC's buffer, the message, the file's).
constexpr uint32_t kPieceBytes = 1 << 20;

// An unanswered call says so; otherwise the server's error, named.
absl::Status NameError(const std::string& name, const absl::Status& s) {
  if (s.ok()) return s;
  if (s.code() == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat(name, " is unreachable: ", s.message()));
  }
  return Prefixed(name + ": ", s);
}

}  // namespace

absl::Status Prefixed(const std::string& prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

ServerProbe::ServerProbe(std::vector<std::string> candidates,
                         const StageConnector& connect)
    : candidates_(std::move(candidates)) {
  for (const std::string& a : candidates_) clients_.push_back(connect(a));
}

void ProbeResult::Keep(const std::vector<int>& indices) {
  ProbeResult kept;
  for (int i : indices) {
    kept.chosen.push_back(chosen[i]);
    kept.held.push_back(held[i]);
    kept.endpoints.push_back(endpoints[i]);
    kept.memory_bytes.push_back(memory_bytes[i]);
    kept.memory_sources.push_back(memory_sources[i]);
  }
  kept.missing = std::move(missing);
  *this = std::move(kept);
}

petra::v1::ListServersResponse DescribeFleet(
    const std::vector<FleetMembers::Member>& members,
    const StageConnector& connect) {
  petra::v1::ListServersResponse response;
  for (const FleetMembers::Member& m : members) {
    petra::v1::FleetServer* s = response.add_servers();
    s->set_address(m.address);
    s->set_origin(m.origin);
    if (m.lease_left.has_value()) {
      using google::protobuf::util::TimeUtil;
      *s->mutable_lease_expire_time() =
          base::NowTimestamp() +
          TimeUtil::MillisecondsToDuration(
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  *m.lease_left)
                  .count());
    }
  }
  // A few threads ask every server: a fleet of dead servers costs a few
  // deadlines, not one each.
  const int n = response.servers_size();
  std::atomic<int> next{0};
  auto ask = [&] {
    for (int i = next++; i < n; i = next++) {
      petra::v1::FleetServer* s = response.mutable_servers(i);
      absl::StatusOr<petra::v1::StageStatus> status =
          connect(s->address())->GetStatus();
      if (status.ok()) {
        *s->mutable_status() = *std::move(status);
      } else {
        s->set_error(std::string(status.status().message()));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min(n, 16); ++t) threads.emplace_back(ask);
  for (std::thread& t : threads) t.join();
  return response;
}

ProbeResult ServerProbe::Round() {
  ProbeResult r;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    const std::string& address = candidates_[i];
    const std::string name = absl::StrCat("stage server ", address);
    absl::StatusOr<petra::v1::StageStatus> status = clients_[i]->GetStatus();
    if (!status.ok()) {
      r.missing.push_back(
          std::string(NameError(name, status.status()).message()));
      continue;
    }
    // A draining server is going away, even while it still holds a job: an
    // Assign would be refused (found by the chaos campaign: SIGTERM during a
    // recovery failed the job).
    const bool draining =
        status->state() == petra::v1::StageStatus::STATE_DRAINING;
    if (!draining && (status->state() == petra::v1::StageStatus::STATE_IDLE ||
                      !status->job_id().empty())) {
      r.chosen.push_back(address);
      r.held.push_back(status->job_id());
      r.endpoints.push_back(status->endpoint());
      r.memory_bytes.push_back(
          static_cast<int64_t>(status->memory_capacity_bytes()));
      r.memory_sources.push_back(status->memory_capacity_source());
    } else {
      r.missing.push_back(absl::StrCat(
          name, " is ", petra::v1::StageStatus::State_Name(status->state())));
    }
  }
  return r;
}

StageFleet::StageFleet(std::string job_id, std::vector<std::string> addresses,
                       const StageConnector& connect,
                       std::vector<petra::v1::LinkEndpoint> endpoints)
    : job_id_(std::move(job_id)),
      addresses_(std::move(addresses)),
      endpoints_(std::move(endpoints)) {
  for (const std::string& a : addresses_) {
    clients_.push_back(connect(a));
    data_keys_.push_back(base::NewSecretKey());
  }
}

std::string StageFleet::Name(int j) const {
  return absl::StrCat("stage ", j, " (", addresses_[j], ")");
}

absl::Status StageFleet::Named(int j, const absl::Status& s) const {
  return NameError(Name(j), s);
}

absl::Status StageFleet::ReleaseStale(const std::vector<std::string>& held) {
  for (int j = 0; j < size() && j < static_cast<int>(held.size()); ++j) {
    if (held[j].empty()) continue;
    petra::v1::ReleaseRequest release;
    release.set_job_id(held[j]);
    if (absl::Status s = Named(j, clients_[j]->Release(release, false));
        !s.ok()) {
      return Prefixed(
          absl::StrCat("releasing the stale job \"", held[j], "\": "), s);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<petra::v1::AssignResponse> StageFleet::Assign(
    int j, const petra::v1::AssignRequest& request) {
  petra::v1::AssignResponse response;
  if (absl::Status s = Named(j, clients_[j]->Assign(request, &response));
      !s.ok()) {
    return s;
  }
  return response;
}

absl::Status StageFleet::Start(petra::v1::Phase phase, uint32_t epoch,
                               int64_t n) {
  for (int j = 0; j < size(); ++j) {
    petra::v1::StartRequest request;
    request.set_job_id(job_id_);
    request.set_phase(phase);
    request.set_epoch(epoch);
    request.set_micro_batches(static_cast<uint64_t>(n));
    if (absl::Status s = Named(j, clients_[j]->Start(request)); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<petra::v1::StageStats>> StageFleet::Poll(
    bool* busy) {
  if (busy != nullptr) *busy = false;
  std::vector<petra::v1::StageStats> stats;
  for (int j = 0; j < size(); ++j) {
    absl::StatusOr<petra::v1::StageStatus> status = clients_[j]->GetStatus();
    if (!status.ok()) return Named(j, status.status());
    if (status->job_id() != job_id_) {
      return absl::AbortedError(absl::StrCat(
          Name(j), " no longer holds the job (it was restarted?)"));
    }
    if (status->state() == petra::v1::StageStatus::STATE_FAILED) {
      return wire::FromProtoStatus(status->error());
    }
    if (busy != nullptr && status->passes_running() > 0) *busy = true;
    petra::v1::StageStats s = status->stats();
    s.set_stage_index(j);
    s.set_address(addresses_[j]);
    stats.push_back(std::move(s));
  }
  return stats;
}

bool StageFleet::LostAStage(const absl::Status& failure) {
  if (failure.code() == absl::StatusCode::kUnavailable) return true;
  for (int j = 0; j < size(); ++j) {
    absl::StatusOr<petra::v1::StageStatus> status = clients_[j]->GetStatus();
    if (!status.ok() || status->job_id() != job_id_) return true;
  }
  return false;
}

void StageFleet::ReleaseAll() {
  // At once: a stage that waits for another (a neighbour, or its copy in a
  // replica) is freed when that one is released.
  ForEach(size(), [&](int j) {
    petra::v1::ReleaseRequest request;
    request.set_job_id(job_id_);
    clients_[j]->Release(request, true).IgnoreError();
    return absl::OkStatus();
  }).IgnoreError();
}

absl::StatusOr<petra::v1::CheckpointResponse> StageFleet::WriteCheckpoint(
    int j, const petra::v1::CheckpointRequest& request) {
  petra::v1::CheckpointResponse written;
  if (absl::Status s = Named(j, clients_[j]->Checkpoint(request, &written));
      !s.ok()) {
    return s;
  }
  return written;
}

absl::StatusOr<std::string> StageFleet::PullCheckpoint(
    int j, const petra::v1::CheckpointResponse& written,
    const std::filesystem::path& file) {
  absl::StatusOr<std::unique_ptr<base::AtomicFile>> out =
      base::AtomicFile::Create(file);
  if (!out.ok()) return out.status();
  while ((*out)->size() < written.size_bytes()) {
    petra::v1::ReadCheckpointRequest read;
    read.set_job_id(job_id_);
    read.set_path(written.path());
    read.set_offset((*out)->size());
    read.set_max_bytes(kPieceBytes);
    petra::v1::ReadCheckpointResponse piece;
    if (absl::Status s = Named(j, clients_[j]->ReadCheckpoint(read, &piece));
        !s.ok()) {
      return s;
    }
    if (piece.data().empty()) break;
    if (absl::Status s =
            (*out)->Append(piece.data().data(), piece.data().size());
        !s.ok()) {
      return s;
    }
  }
  if ((*out)->size() != written.size_bytes()) {
    return absl::DataLossError(
        absl::StrCat(Name(j), ": checkpoint read back as ", (*out)->size(),
                     " bytes, written as ", written.size_bytes()));
  }
  if (absl::Status s = (*out)->Commit(); !s.ok()) return s;
  if ((*out)->sha256() != written.sha256()) {
    // Committed, then removed: its folder is not a checkpoint until every
    // stage's file is in and checked.
    std::error_code ec;
    std::filesystem::remove(file, ec);
    return absl::DataLossError(
        absl::StrCat(Name(j), ": checkpoint read back with SHA-256 ",
                     (*out)->sha256(), ", written with ", written.sha256()));
  }
  return written.sha256();
}

absl::StatusOr<petra::v1::RestoreCheckpointResponse> StageFleet::PushCheckpoint(
    int j, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(file.filename().string(), " is missing"));
  }
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  petra::v1::RestoreCheckpointResponse response;
  std::string piece_bytes;
  for (uint64_t offset = 0; offset < total; offset += kPieceBytes) {
    piece_bytes.resize(std::min<uint64_t>(kPieceBytes, total - offset));
    if (!in.read(piece_bytes.data(),
                 static_cast<std::streamsize>(piece_bytes.size()))) {
      return absl::DataLossError(
          absl::StrCat("cannot read ", file.string(), " at ", offset));
    }
    petra::v1::RestoreCheckpointRequest piece;
    piece.set_job_id(job_id_);
    piece.set_offset(offset);
    piece.set_total_bytes(total);
    piece.set_data(piece_bytes);
    if (absl::Status s =
            Named(j, clients_[j]->RestoreCheckpoint(piece, &response));
        !s.ok()) {
      return s;
    }
  }
  return response;
}

absl::Status StageFleet::ForEach(int stages,
                                 const std::function<absl::Status(int)>& call,
                                 int at_most) {
  std::vector<absl::Status> results(stages);
  std::atomic<int> next{0};
  const int threads_wanted = at_most > 0 ? std::min(at_most, stages) : stages;
  auto work = [&] {
    for (int j = next++; j < stages; j = next++) results[j] = call(j);
  };
  // This thread is one of the workers.
  std::vector<std::thread> threads;
  threads.reserve(threads_wanted);
  for (int t = 1; t < threads_wanted; ++t) {
    // A process at its memory or thread limit cannot start another thread:
    // the calls run on the threads it has (this one too), slower, never
    // aborting the coordinator.
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace petra::coordinator

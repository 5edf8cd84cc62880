#include "stage_server/stage_checkpoints.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"
#include "services/engine/state_file.h"

namespace petra::stage_server {
namespace {

constexpr uint32_t kMaxReadBytes = 4 << 20;
// An uploaded checkpoint goes to disk; a bound on what one may claim.
constexpr uint64_t kMaxRestoreBytes = uint64_t{64} << 30;
constexpr uint64_t kMaxRestorePieceBytes = 16 << 20;

absl::Status Released(const StageJob& job) {
  if (job.worker == nullptr || job.released) {
    return absl::FailedPreconditionError("the job was released");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRelativeName(const std::string& name, const char* what) {
  if (name.empty() || name.size() > 200 || name.front() == '/' ||
      absl::StrContains(name, "..") || absl::StrContains(name, "//")) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " \"", name, "\" is not a relative name without \"..\""));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' &&
        c != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " \"", name, "\": only letters, digits and -_./ are allowed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StageCheckpoints::Target> StageCheckpoints::Where(
    const StageJob& job, const std::string& name) const {
  if (absl::Status s = CheckRelativeName(name, "name"); !s.ok()) return s;
  Target t;
  t.path = absl::StrCat(job.id(), "/", name, "/stage-", job.index(), ".pt");
  // The job's directory or the name may be a symbolic link out of the root.
  absl::StatusOr<std::filesystem::path> file =
      base::ConfinedPath(state_dir_, t.path, "name");
  if (!file.ok()) return file.status();
  t.file = std::move(*file);
  return t;
}

absl::Status StageCheckpoints::Write(
    StageJob& job, const petra::v1::CheckpointRequest& request,
    const Target& target, petra::v1::CheckpointResponse* response) const {
  if (absl::Status s = Released(job); !s.ok()) return s;
  engine::StageCheckpointMeta meta;
  meta.stage_index = job.index();
  meta.optimizer_steps = job.worker->optimizer_steps();
  meta.epoch = static_cast<int64_t>(request.epoch());
  meta.samples_seen = static_cast<int64_t>(request.samples_seen());
  // Straight to disk: the checkpoint costs the stage no memory beyond its
  // state (a whole encoded copy put a stage with momentum over its cap).
  absl::StatusOr<std::unique_ptr<base::AtomicFile>> file =
      base::AtomicFile::Create(target.file);
  if (!file.ok()) return file.status();
  absl::Status written = engine::WriteStageCheckpoint(
      *job.worker, meta, [&](const char* data, size_t size) {
        return (*file)->Append(data, size).ok();
      });
  if (!written.ok()) {
    // The file's own error says why (a full disk) better than torch's; an
    // unfinished file is removed, never committed.
    return (*file)->status().ok() ? written : (*file)->status();
  }
  if (absl::Status s = (*file)->Commit(); !s.ok()) return s;
  response->set_path(target.path);
  response->set_size_bytes((*file)->size());
  response->set_sha256((*file)->sha256());
  return absl::OkStatus();
}

absl::Status StageCheckpoints::Read(
    const petra::v1::ReadCheckpointRequest& request,
    petra::v1::ReadCheckpointResponse* response) const {
  if (absl::Status s = CheckRelativeName(request.path(), "path"); !s.ok())
    return s;
  if (!absl::StartsWith(request.path(), request.job_id() + "/")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "path \"", request.path(), "\" is not a checkpoint of job \"",
        request.job_id(), "\""));
  }
  absl::StatusOr<std::filesystem::path> path =
      base::ConfinedPath(state_dir_, request.path(), "path");
  if (!path.ok()) return path.status();
  std::error_code ec;
  std::ifstream in(*path, std::ios::binary | std::ios::ate);
  // A directory opens too, and then reports a nonsense size.
  if (!in || !std::filesystem::is_regular_file(*path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint \"", request.path(), "\""));
  }
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  if (request.offset() > total) {
    return absl::OutOfRangeError(absl::StrCat(
        "offset ", request.offset(), " is past the end (", total, " bytes)"));
  }
  const uint32_t max = request.max_bytes() == 0
                           ? kMaxReadBytes
                           : std::min(request.max_bytes(), kMaxReadBytes);
  std::string data(std::min<uint64_t>(max, total - request.offset()), '\0');
  in.seekg(static_cast<std::streamoff>(request.offset()));
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (!in) {
    return absl::DataLossError(
        absl::StrCat("checkpoint \"", request.path(), "\" could not be read"));
  }
  response->set_data(std::move(data));
  response->set_total_bytes(total);
  return absl::OkStatus();
}

absl::StatusOr<std::filesystem::path> StageCheckpoints::RestoreFile(
    const std::string& name) const {
  if (absl::Status s = CheckRelativeName(name, "restore_checkpoint"); !s.ok())
    return s;
  return base::ConfinedPath(state_dir_, name, "restore_checkpoint");
}

absl::Status StageCheckpoints::RestoreFrom(const std::filesystem::path& file,
                                           const std::string& name,
                                           StageJob& job) {
  absl::StatusOr<engine::StageCheckpointMeta> meta =
      engine::RestoreStageCheckpointFile(file, *job.worker);
  if (meta.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(
        absl::StrCat("restore_checkpoint \"", name, "\" not found"));
  }
  return meta.status();
}

absl::StatusOr<std::optional<std::filesystem::path>> StageCheckpoints::AddPiece(
    StageJob& job, const petra::v1::RestoreCheckpointRequest& request,
    petra::v1::RestoreCheckpointResponse* response) const {
  RestoreUpload& upload = job.upload;
  const uint64_t total = request.total_bytes();
  if (total == 0 || total > kMaxRestoreBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "total_bytes ", total, " is not in [1, ", kMaxRestoreBytes, "]"));
  }
  if (request.data().empty() || request.data().size() > kMaxRestorePieceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a piece must hold 1 to ", kMaxRestorePieceBytes,
                     " bytes, got ", request.data().size()));
  }
  if (request.offset() + request.data().size() > total) {
    return absl::OutOfRangeError(
        absl::StrCat("piece ends at ", request.offset() + request.data().size(),
                     ", past total_bytes ", total));
  }
  if (request.offset() == 0) {
    // The one before goes first: its temporary file has the same name.
    upload = RestoreUpload();
    absl::StatusOr<Target> target = Where(job, "restore");
    if (!target.ok()) return target.status();
    absl::StatusOr<std::unique_ptr<base::AtomicFile>> file =
        base::AtomicFile::Create(target->file);
    if (!file.ok()) return file.status();
    upload.path = target->file;
    upload.file = std::move(*file);
    upload.total = total;
  }
  const uint64_t received = upload.file == nullptr ? 0 : upload.file->size();
  if (upload.file == nullptr || request.offset() != received ||
      total != upload.total) {
    return absl::OutOfRangeError(
        absl::StrCat("piece at offset ", request.offset(), " of ", total,
                     " bytes does not follow the ", received,
                     " bytes received of ", upload.total));
  }
  if (absl::Status s =
          upload.file->Append(request.data().data(), request.data().size());
      !s.ok()) {
    upload = RestoreUpload();
    return s;
  }
  response->set_received_bytes(upload.file->size());
  if (upload.file->size() < total) {
    return std::optional<std::filesystem::path>();
  }
  absl::Status committed = upload.file->Commit();
  const std::filesystem::path whole = std::move(upload.path);
  upload = RestoreUpload();
  if (!committed.ok()) return committed;
  return std::optional<std::filesystem::path>(whole);
}

absl::Status StageCheckpoints::Restore(
    StageJob& job, const std::filesystem::path& file,
    petra::v1::RestoreCheckpointResponse* response) {
  const absl::Status released = Released(job);
  absl::StatusOr<engine::StageCheckpointMeta> meta =
      released.ok() ? engine::RestoreStageCheckpointFile(file, *job.worker)
                    : absl::StatusOr<engine::StageCheckpointMeta>(released);
  std::error_code ec;
  std::filesystem::remove(file, ec);
  if (!meta.ok()) return meta.status();
  response->set_restored(true);
  response->set_epoch(static_cast<uint64_t>(meta->epoch));
  response->set_optimizer_steps(static_cast<uint64_t>(meta->optimizer_steps));
  response->set_samples_seen(static_cast<uint64_t>(meta->samples_seen));
  return absl::OkStatus();
}

}  // namespace petra::stage_server

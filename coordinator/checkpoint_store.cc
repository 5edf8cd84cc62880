#include "coordinator/checkpoint_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"
#include "services/engine/state_file.h"

namespace petra::coordinator {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat(path.filename().string(), " is missing"));
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

}  // namespace

std::filesystem::path CheckpointStore::IncomingFolder(uint32_t epoch) const {
  return layout_.checkpoints() /
         absl::StrCat("incoming-", JobLayout::CheckpointName(epoch));
}

std::filesystem::path CheckpointStore::Incoming(uint32_t epoch,
                                                int stage) const {
  return IncomingFolder(epoch) / JobLayout::StageFileName(stage);
}

void CheckpointStore::Discard(uint32_t epoch) const {
  base::RemoveTree(IncomingFolder(epoch)).IgnoreError();
}

absl::StatusOr<std::string> CheckpointStore::Commit(
    uint32_t epoch, const std::vector<std::string>& sha256s, uint32_t keep_last,
    const petra::v1::Preprocessing& input) {
  const std::filesystem::path incoming = IncomingFolder(epoch);
  for (size_t j = 0; j < sha256s.size(); ++j) {
    if (absl::Status s = base::WriteFileAtomically(
            JobLayout::Checksum(incoming /
                                JobLayout::StageFileName(static_cast<int>(j))),
            sha256s[j] + "\n");
        !s.ok()) {
      return s;
    }
  }
  const std::filesystem::path folder = layout_.checkpoint(epoch);
  if (absl::Status s = base::RemoveTree(folder); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::rename(incoming, folder, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot move ", incoming.string(),
                                            " to ", folder.string(), ": ",
                                            ec.message()));
  }
  std::vector<std::filesystem::path> files;
  for (size_t j = 0; j < sha256s.size(); ++j) {
    files.push_back(layout_.stage_file(epoch, static_cast<int>(j)));
  }
  absl::StatusOr<std::unique_ptr<base::AtomicFile>> exported =
      base::AtomicFile::Create(layout_.export_file());
  if (!exported.ok()) return exported.status();
  absl::Status merged =
      engine::WriteExport(files, input, [&](const char* data, size_t size) {
        return (*exported)->Append(data, size).ok();
      });
  if (!merged.ok()) {
    // The file's own error (a full disk) says more than the merge's.
    return (*exported)->status().ok() ? merged : (*exported)->status();
  }
  if (absl::Status s = (*exported)->Commit(); !s.ok()) return s;
  // Read from the disk, so checkpoints of an earlier coordinator process
  // count too.
  std::vector<std::pair<uint32_t, std::filesystem::path>> all;
  for (const auto& entry :
       std::filesystem::directory_iterator(layout_.checkpoints(), ec)) {
    std::optional<uint32_t> n =
        JobLayout::CheckpointEpoch(entry.path().filename().string());
    if (n && *n <= epoch) all.emplace_back(*n, entry.path());
  }
  std::sort(all.rbegin(), all.rend());
  const size_t keep = std::max<uint32_t>(1, keep_last);
  for (size_t i = keep; i < all.size(); ++i) {
    petra::base::RemoveTree(all[i].second).IgnoreError();
  }
  return layout_.RelativeCheckpoint(epoch);
}

absl::StatusOr<ResumePoint> FindResumePoint(const std::string& state_dir,
                                            const std::string& from_id,
                                            int stages) {
  // The id comes from the submitted spec: it names a directory under
  // --state-dir and may not lead out of it.
  absl::StatusOr<std::filesystem::path> root =
      base::ConfinedPath(state_dir, JobLayout::RelativeCheckpoints(from_id),
                         "checkpoint.resume_from_job");
  if (!root.ok()) return root.status();
  std::vector<std::pair<uint32_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(*root, ec)) {
    std::optional<uint32_t> epoch =
        JobLayout::CheckpointEpoch(entry.path().filename().string());
    if (entry.is_directory() && epoch) found.emplace_back(*epoch, entry.path());
  }
  std::sort(found.rbegin(), found.rend());
  ResumePoint point;
  for (const auto& [epoch, dir] : found) {
    std::vector<std::filesystem::path> files;
    absl::Status problem;
    for (int j = 0; j < stages && problem.ok(); ++j) {
      const std::filesystem::path file = dir / JobLayout::StageFileName(j);
      // A damaged file is passed over for an older checkpoint: its SHA-256
      // must match the one written beside it, and it must read as a state
      // file (its tensors' bytes are not loaded here).
      absl::StatusOr<std::string> sha = ReadWhole(JobLayout::Checksum(file));
      absl::StatusOr<std::string> actual = base::Sha256OfFile(file);
      if (!actual.ok()) {
        problem = actual.status();
      } else if (!sha.ok()) {
        problem = sha.status();
      } else if (absl::StripAsciiWhitespace(*sha) != *actual) {
        problem = absl::DataLossError(absl::StrCat(
            JobLayout::StageFileName(j), " does not match its SHA-256"));
      } else if (absl::Status s = engine::CheckStateFile(file); !s.ok()) {
        problem = absl::DataLossError(absl::StrCat(
            JobLayout::StageFileName(j), " is unreadable: ", s.message()));
      }
      files.push_back(file);
    }
    if (problem.ok() &&
        std::filesystem::exists(dir / JobLayout::StageFileName(stages))) {
      problem = absl::FailedPreconditionError(
          absl::StrCat("it has more than ", stages, " stages"));
    }
    if (!problem.ok()) {
      point.skipped.push_back(
          absl::StrCat(dir.filename().string(), ": ", problem.message()));
      continue;
    }
    point.epoch = epoch;
    point.directory = dir.string();
    point.files = std::move(files);
    return point;
  }
  return absl::NotFoundError(absl::StrCat(
      "job \"", from_id, "\" has no usable checkpoint",
      point.skipped.empty()
          ? std::string(" (none written)")
          : absl::StrCat(" (", absl::StrJoin(point.skipped, "; "), ")")));
}

}  // namespace petra::coordinator

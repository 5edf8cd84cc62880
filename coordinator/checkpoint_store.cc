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

absl::StatusOr<std::string> CheckpointStore::Write(
    uint32_t epoch, const std::vector<std::string>& stage_files,
    uint32_t keep_last, const petra::v1::Preprocessing& input) {
  for (size_t j = 0; j < stage_files.size(); ++j) {
    const std::filesystem::path file =
        layout_.stage_file(epoch, static_cast<int>(j));
    if (absl::Status s = base::WriteFileAtomically(file, stage_files[j]);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = base::WriteFileAtomically(
            JobLayout::Checksum(file), base::Sha256Hex(stage_files[j]) + "\n");
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::string> exported =
      engine::MergeForExport(stage_files, input);
  if (!exported.ok()) return exported.status();
  if (absl::Status s =
          base::WriteFileAtomically(layout_.export_file(), *exported);
      !s.ok()) {
    return s;
  }
  // Read from the disk, so checkpoints of an earlier coordinator process
  // count too.
  std::vector<std::pair<uint32_t, std::filesystem::path>> all;
  std::error_code ec;
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
    std::vector<std::string> files;
    absl::Status problem;
    for (int j = 0; j < stages && problem.ok(); ++j) {
      absl::StatusOr<std::string> bytes =
          ReadWhole(dir / JobLayout::StageFileName(j));
      if (!bytes.ok()) {
        problem = bytes.status();
        break;
      }
      // A damaged file is passed over for an older checkpoint: its SHA-256
      // must match the one written beside it, and it must decode.
      absl::StatusOr<std::string> sha =
          ReadWhole(JobLayout::Checksum(dir / JobLayout::StageFileName(j)));
      if (!sha.ok()) {
        problem = sha.status();
        break;
      }
      if (absl::StripAsciiWhitespace(*sha) != base::Sha256Hex(*bytes)) {
        problem = absl::DataLossError(absl::StrCat(
            JobLayout::StageFileName(j), " does not match its SHA-256"));
        break;
      }
      absl::StatusOr<engine::NamedTensors> t = engine::DecodeStateFile(*bytes);
      if (!t.ok()) {
        problem = absl::DataLossError(
            absl::StrCat(JobLayout::StageFileName(j),
                         " is unreadable: ", t.status().message()));
        break;
      }
      files.push_back(std::move(*bytes));
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

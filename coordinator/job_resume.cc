#include "coordinator/job_resume.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/job_runner.h"
#include "services/cli/durable_file.h"
#include "services/cli/paths.h"
#include "services/engine/state_file.h"

namespace petra::coordinator {
namespace {

using google::protobuf::util::MessageDifferencer;

// Clears what a resumed job may change, so the rest can be compared whole.
petra::v1::JobSpec WithoutFreeFields(petra::v1::JobSpec s) {
  s.clear_name();
  s.mutable_training()->clear_epochs();
  s.mutable_training()->clear_max_steps();
  s.mutable_training()->clear_max_in_flight();
  s.mutable_training()->clear_grad_diagnostics_every();
  s.clear_evaluation();
  s.clear_checkpoint();
  s.clear_devices();
  return s;
}

absl::StatusOr<std::string> ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat(path.filename().string(), " is missing"));
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

}  // namespace

absl::Status CheckResumable(const petra::v1::JobSpec& from,
                            const petra::v1::JobSpec& spec) {
  MessageDifferencer differencer;
  std::string report;
  differencer.ReportDifferencesToString(&report);
  if (differencer.Compare(WithoutFreeFields(from), WithoutFreeFields(spec))) {
    return absl::OkStatus();
  }
  // The report names each field with both values, one per line.
  return absl::FailedPreconditionError(absl::StrCat(
      "the spec differs from the resumed job's where it must "
      "not (only name, epochs, max_steps, max_in_flight, "
      "grad_diagnostics_every, evaluation, checkpoint and devices "
      "may change): ",
      absl::StrJoin(absl::StrSplit(absl::StripSuffix(report, "\n"), '\n'),
                    "; ")));
}

absl::StatusOr<ResumePoint> FindResumePoint(const std::string& state_dir,
                                            const std::string& from_id,
                                            int stages) {
  // The id comes from the submitted spec: it names a directory under
  // --state-dir and may not lead out of it.
  absl::StatusOr<std::filesystem::path> root =
      cli::ConfinedPath(state_dir, JobDirectory(from_id) + "/checkpoints",
                        "checkpoint.resume_from_job");
  if (!root.ok()) return root.status();
  std::vector<std::pair<uint32_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(*root, ec)) {
    uint32_t epoch = 0;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && absl::StartsWith(name, "epoch-") &&
        absl::SimpleAtoi(name.substr(6), &epoch)) {
      found.emplace_back(epoch, entry.path());
    }
  }
  std::sort(found.rbegin(), found.rend());
  ResumePoint point;
  for (const auto& [epoch, dir] : found) {
    std::vector<std::string> files;
    absl::Status problem;
    for (int j = 0; j < stages && problem.ok(); ++j) {
      absl::StatusOr<std::string> bytes =
          ReadWhole(dir / absl::StrCat("stage-", j, ".pt"));
      if (!bytes.ok()) {
        problem = bytes.status();
        break;
      }
      // A damaged file is passed over for an older checkpoint: its SHA-256
      // must match the one written beside it, and it must decode.
      absl::StatusOr<std::string> sha =
          ReadWhole(dir / absl::StrCat("stage-", j, ".pt.sha256"));
      if (!sha.ok()) {
        problem = sha.status();
        break;
      }
      if (absl::StripAsciiWhitespace(*sha) != cli::Sha256Hex(*bytes)) {
        problem = absl::DataLossError(
            absl::StrCat("stage-", j, ".pt does not match its SHA-256"));
        break;
      }
      absl::StatusOr<engine::NamedTensors> t = engine::DecodeStateFile(*bytes);
      if (!t.ok()) {
        problem = absl::DataLossError(absl::StrCat(
            "stage-", j, ".pt is unreadable: ", t.status().message()));
        break;
      }
      files.push_back(std::move(*bytes));
    }
    if (problem.ok() &&
        std::filesystem::exists(dir / absl::StrCat("stage-", stages, ".pt"))) {
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

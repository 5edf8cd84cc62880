#include "services/job/job_spec_validation.h"

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "services/base/utf8.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/spec_checks.h"

namespace petra::job {
namespace {

using spec_checks::kMaxNameLength;
using spec_checks::kMaxPriority;
using spec_checks::kMaxReplicas;
using spec_checks::Problems;

// Every free-text field of the spec must be UTF-8 (devices are checked
// against their few ASCII forms already).
void CheckText(const petra::v1::JobSpec& s, Problems& p) {
  using Field = std::pair<const char*, const std::string*>;
  for (const auto& [field, value] :
       {Field{"name", &s.name()}, Field{"dataset.path", &s.dataset().path()},
        Field{"checkpoint.resume_from_job",
              &s.checkpoint().resume_from_job()}}) {
    // proto3 strings must be UTF-8: a spec that is not cannot be sent over
    // gRPC or written as the JSON job record.
    if (!base::IsUtf8(*value)) {
      p.Add(field, absl::StrCat("\"", absl::CHexEscape(*value), "\""),
            "must be UTF-8 text");
    }
  }
}

void CheckRest(const petra::v1::JobSpec& s, Problems& p) {
  if (s.name().size() > kMaxNameLength) {
    p.Add("name", absl::StrCat("<", s.name().size(), " characters>"),
          absl::StrCat("at most ", kMaxNameLength, " characters"));
  }
  if (const std::optional<uint32_t> hidden =
          base::FirstHiddenCodePoint(s.name())) {
    p.Add("name", absl::StrCat("\"", absl::CHexEscape(s.name()), "\""),
          absl::StrCat("may not contain control characters, bidirectional or "
                       "invisible formatting, or line separators (it holds ",
                       base::CodePointName(*hidden), ")"));
  }
  if (s.replicas() < 1 || s.replicas() > kMaxReplicas) {
    p.Add("replicas", s.replicas(),
          absl::StrCat("must be 1 to ", kMaxReplicas,
                       " (copies of the pipeline)"));
  }
  if (s.priority() < -kMaxPriority || s.priority() > kMaxPriority) {
    p.Add("priority", s.priority(),
          absl::StrCat("must be ", -kMaxPriority, " to ", kMaxPriority,
                       " (higher starts first)"));
  }
  if (s.evaluation().every_epochs() < 1) {
    p.Add("evaluation.every_epochs", s.evaluation().every_epochs(),
          "must be at least 1");
  }
  if (s.checkpoint().keep_last() < 1) {
    p.Add("checkpoint.keep_last", s.checkpoint().keep_last(),
          "must be at least 1");
  }
  const std::string& resume = s.checkpoint().resume_from_job();
  if (resume.find_first_of("/\\") != std::string::npos || resume == ".." ||
      resume == ".") {
    p.Add("checkpoint.resume_from_job", absl::StrCat("\"", resume, "\""),
          "must be a job id, not a path");
  }
}

}  // namespace

int StageCount(const petra::v1::JobSpec& resolved) {
  if (resolved.partition().layout_case() ==
      petra::v1::PartitionSpec::kStageCount) {
    return static_cast<int>(resolved.partition().stage_count());
  }
  if (resolved.partition().layout_case() == petra::v1::PartitionSpec::kSplits) {
    return resolved.partition().splits().split_at_size() + 1;
  }
  absl::StatusOr<catalog::ArchitectureInfo> arch =
      catalog::GetArchitectureInfo(resolved.model());
  return arch.ok() ? arch->per_block_stages : 0;
}

std::string DeviceForStage(const petra::v1::JobSpec& resolved, int index) {
  if (resolved.devices_size() == 0) return "cpu";
  if (resolved.devices_size() == 1) return resolved.devices(0);
  return index < resolved.devices_size() ? resolved.devices(index) : "cpu";
}

std::string RequestedDevice(const petra::v1::JobSpec& resolved, int index) {
  return resolved.devices_size() == 0 ? "" : DeviceForStage(resolved, index);
}

absl::StatusOr<petra::v1::JobSpec> ResolveJobSpec(
    const petra::v1::JobSpec& spec) {
  petra::v1::JobSpec resolved = spec;
  ApplyJobSpecDefaults(&resolved);
  Problems problems;
  spec_checks::CheckModelAndData(resolved, problems);
  spec_checks::CheckPartitionAndDevices(resolved, problems);
  spec_checks::CheckTraining(resolved, problems);
  spec_checks::CheckOptimizerAndSchedule(resolved, problems);
  CheckRest(resolved, problems);
  CheckText(resolved, problems);
  if (!problems.empty()) return problems.ToStatus();
  return resolved;
}

absl::Status ValidateJobSpec(const petra::v1::JobSpec& spec) {
  return ResolveJobSpec(spec).status();
}

}  // namespace petra::job

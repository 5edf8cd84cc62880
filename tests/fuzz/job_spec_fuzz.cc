// libFuzzer target: a job spec as a client could submit it (JSON or text
// proto) -> ParseJobSpec -> ResolveJobSpec, and what the coordinator and the
// stages then derive from a spec that passes: stage count, devices, the JSON
// of the job record, the dataset path under --data-root. Every input must
// end in INVALID_ARGUMENT or a spec those accept; never a crash.
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <string>

#include "services/base/paths.h"
#include "services/catalog/device_name.h"
#include "services/job/job_spec_io.h"
#include "services/job/job_spec_validation.h"

namespace petra::fuzz {
namespace {

using google::protobuf::util::MessageDifferencer;

void Expect(bool condition) {
  if (!condition) __builtin_trap();
}

void CheckResolved(const petra::v1::JobSpec& resolved) {
  // Resolving is idempotent: the stages resolve the coordinator's resolved
  // spec again and must get the same job.
  absl::StatusOr<petra::v1::JobSpec> again = job::ResolveJobSpec(resolved);
  Expect(again.ok() && MessageDifferencer::Equals(*again, resolved));
  const int stages = job::StageCount(resolved);
  Expect(stages >= 1);
  for (int j = 0; j < stages; ++j) {
    Expect(
        catalog::ParseDeviceName(job::DeviceForStage(resolved, j), "d").ok());
  }
  // The job record is JSON and must read back as the same spec.
  absl::StatusOr<petra::v1::JobSpec> back =
      job::ParseJobSpec(job::JobSpecToJson(resolved), job::SpecFormat::kJson);
  Expect(back.ok() && MessageDifferencer::Equals(*back, resolved));
  // The coordinator confines the dataset path to its --data-root.
  const std::string root = "/nonexistent-petra-fuzz-root";
  absl::StatusOr<std::filesystem::path> data =
      base::ConfinedPath(root, resolved.dataset().path(), "dataset.path",
                         base::AbsolutePath::kAllowInsideRoot);
  if (data.ok()) {
    Expect(data->string() == root || data->string().rfind(root + "/", 0) == 0);
  } else {
    Expect(data.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace petra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petra;
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (job::SpecFormat format :
       {job::SpecFormat::kJson, job::SpecFormat::kTextProto}) {
    absl::StatusOr<petra::v1::JobSpec> spec = job::ParseJobSpec(text, format);
    if (!spec.ok()) {
      fuzz::Expect(spec.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(*spec);
    if (!resolved.ok()) {
      fuzz::Expect(resolved.status().code() ==
                   absl::StatusCode::kInvalidArgument);
      continue;
    }
    fuzz::CheckResolved(*resolved);
  }
  return 0;
}

// JobSpec validation, in one function: every rule a spec must satisfy before
// a coordinator plans or a stage accepts it.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

#include <cstdint>

namespace petra::job {

// The most evaluations inside epochs (EvaluationSpec.every_steps) a job may
// ask for: each is kept in the job's record. Checked once the data is
// loaded (engine::StepsPerEpoch): only then are the job's steps known.
inline constexpr uint64_t kMaxEvaluationsInsideEpochs = 10000;

// Applies the defaults (job_spec_defaults.h) to a copy of `spec` and checks
// the result. On failure: INVALID_ARGUMENT listing every problem as
// "<field> = <value>: <reason>", separated by "; ".
absl::StatusOr<petra::v1::JobSpec> ResolveJobSpec(
    const petra::v1::JobSpec& spec);

// ResolveJobSpec without the result.
absl::Status ValidateJobSpec(const petra::v1::JobSpec& spec);

// The number of stages the (resolved) spec asks for.
int StageCount(const petra::v1::JobSpec& resolved);

// The device string of stage `index` of a resolved spec when every stage runs
// in this process ("cpu" when the spec names none).
std::string DeviceForStage(const petra::v1::JobSpec& resolved, int index);

// The device the spec asks for stage `index`; empty when it names none (a
// fleet then runs each stage on the device its server was started with).
std::string RequestedDevice(const petra::v1::JobSpec& resolved, int index);

}  // namespace petra::job

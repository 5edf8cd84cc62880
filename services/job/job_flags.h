// The job flags every command that builds a JobSpec takes (`petra spec`,
// and later `petra train` and `petra submit`): one definition, so a flag
// means the same everywhere.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/base/flag_set.h"

namespace petra::job {

// --embed-dim, --depth, --heads, --mlp-ratio, --patch-size: the sizes of a
// revvit or vit, written to what `target` returns (model.transformer).
void AddTransformerFlags(base::FlagSet& f,
                         std::function<petra::v1::TransformerSpec*()> target);

// Binds the job flags to fields of *spec. A flag sets its field only when
// given, so unset fields keep their defaults. `base` is the spec the flags
// go on top of (a command's embedded job; empty for a spec built from flags
// alone): --help shows, as each flag's default, the value the job gets when
// the flag is left out, read from `base` with ApplyJobSpecDefaults
// (job_spec_defaults.h), so help and job cannot disagree.
void AddJobFlags(base::FlagSet& flags, petra::v1::JobSpec* spec,
                 const petra::v1::JobSpec& base = petra::v1::JobSpec());

// Overlays the fields set in `overrides` on `base` (repeated fields given in
// `overrides` replace those of `base`; another architecture drops the base's
// width and transformer sizes, which were for the old one).
void OverlayJobSpec(const petra::v1::JobSpec& overrides,
                    petra::v1::JobSpec* base);

// The spec a command runs: `base`, replaced by the file `from_file` when one
// is named, with `overrides` (the job flags) on top; then resolved and
// validated (job_spec_validation.h). Errors name the file or the fields.
// Flags that change the base's architecture or dataset drop the base's name
// (the job id names the job), unless they name it too.
absl::StatusOr<petra::v1::JobSpec> AssembleJobSpec(
    const petra::v1::JobSpec& base, const std::string& from_file,
    const petra::v1::JobSpec& overrides);

}  // namespace petra::job

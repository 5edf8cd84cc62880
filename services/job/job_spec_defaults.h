// The one place JobSpec defaults live.
#pragma once

#include "petra/v1/job.pb.h"

namespace petra::job {

// Fills every optional field that is not set and every enum left at
// *_UNSPECIFIED (except the required architecture and dataset kind) with its
// documented default. Values that are set are left alone, even when invalid:
// validation reports them.
void ApplyJobSpecDefaults(petra::v1::JobSpec* spec);

// AdamW's peak learning rate per 64 samples of effective batch (Recipe,
// RECIPE_TRANSFORMER in training.proto).
inline constexpr double kAdamWLearningRatePer64 = 2e-3;

// The default --data-root: where Debian's dataset packages install.
inline constexpr char kDefaultDataRoot[] = "/usr/share/datasets";

// The default location of a dataset kind, relative to --data-root.
const char* DefaultDatasetPath(petra::v1::DatasetKind kind);

}  // namespace petra::job

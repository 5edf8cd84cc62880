// The embedded default job of `petra train` (and the base `petra profile`
// starts from): the one place its values live.
#pragma once

#include "petra/v1/job.pb.h"

namespace petra::client {

// RevNet18 (width 0.25) on Fashion-MNIST, 2 stages, 3 epochs, seed 1.
petra::v1::JobSpec DefaultTrainJob();

}  // namespace petra::client

// The --stages flag: the fleet's stage server addresses.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace petra::coordinator {

// Expands a comma-separated list of host:port entries. An entry may hold one
// range "{A..B}" (A <= B, inclusive), as Kubernetes StatefulSet DNS names do:
// "petra-stage-{0..2}.petra-stage:50051" gives petra-stage-0.petra-stage:50051,
// petra-stage-1..., petra-stage-2.... Every address is checked; duplicates and
// an empty list are errors naming --stages.
absl::StatusOr<std::vector<std::string>> ExpandStageList(
    const std::string& flag_value);

}  // namespace petra::coordinator

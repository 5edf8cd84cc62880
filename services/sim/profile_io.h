// Profiles (proto/petra/v1/profile.proto) as JSON files, and the stage costs
// the simulator takes from them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/profile.pb.h"
#include "services/sim/pipeline_sim.h"

namespace petra::sim {

// Proto3 JSON: field names in lowerCamelCase or as in the proto; unknown
// fields are refused (a typo would silently zero a cost). INVALID_ARGUMENT
// with the parser's message. Does not validate: see ValidateProfile.
absl::StatusOr<petra::v1::Profile> ParseProfileJson(const std::string& text);

// Reads and parses a file; every error message starts with the path.
// NOT_FOUND / PERMISSION_DENIED when it cannot be opened.
absl::StatusOr<petra::v1::Profile> ReadProfileFile(const std::string& path);

// Pretty JSON with the proto's field names (snake_case).
std::string ProfileToJson(const petra::v1::Profile& profile);

// At least one stage; stage i has index i; times finite and >= 0; block
// ranges (when given) non-empty and consecutive; micro_batch_size >= 1.
// INVALID_ARGUMENT naming the field, e.g. "stages[2].forward_seconds".
absl::Status ValidateProfile(const petra::v1::Profile& profile);

// ValidateProfile, then one StageCost per stage.
absl::StatusOr<std::vector<StageCost>> StageCostsFromProfile(
    const petra::v1::Profile& profile);

}  // namespace petra::sim

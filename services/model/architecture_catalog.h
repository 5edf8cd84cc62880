// Facts about each architecture that planning and validation need without
// building the network (no torch here).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::model {

struct ArchitectureInfo {
  // Display name, e.g. "RevNet18".
  std::string display_name;
  // Whether the residual blocks are reversible couplings.
  bool reversible = false;
  // Residual blocks, not counting stem and head.
  int residual_blocks = 0;
  // Stages of the per-block partition: stem + residual blocks + head.
  int per_block_stages = 0;
};

// NOT_FOUND-free: INVALID_ARGUMENT for ARCHITECTURE_UNSPECIFIED and unknown
// values, naming model.architecture.
absl::StatusOr<ArchitectureInfo> GetArchitectureInfo(int architecture);

}  // namespace petra::model

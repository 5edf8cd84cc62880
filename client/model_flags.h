// The flags that pick a network of the model zoo and its partition (--arch,
// --variant, --width, --stages), and the summaries built from them: shared
// by `petra model-info` and `petra simulate` so both read them alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/base/flag_set.h"
#include "services/model/network_summary.h"

namespace petra::client {

struct ModelFlags {
  petra::v1::JobSpec spec;  // model and partition, filled by the flags
  double width = 1.0;
  std::string stages = "per-block";
};

// Adds --arch, --variant (default imagenet), --width, the transformer sizes,
// --stages and --partition-cost to
// `flags`, bound to *m; `arch_help` is --arch's help text.
void AddModelFlags(
    base::FlagSet& flags, ModelFlags* m,
    const std::string& arch_help = "network architecture (required)");

// After parsing: the spec to resolve with job::ResolveJobSpec.
// INVALID_ARGUMENT "--arch is required" or "flag --stages: bad value ...".
absl::StatusOr<petra::v1::JobSpec> ModelSpecFromFlags(const ModelFlags& m);

struct PartitionedModel {
  std::vector<model::BlockSummary> blocks;
  std::vector<model::StageSummary> stages;
  std::vector<int64_t> input_shape;  // one sample: {channels, height, width}
  int64_t parameters = 0;
};

// Builds the network of a resolved spec (seed 0), summarizes its blocks and
// plans its partition.
absl::StatusOr<PartitionedModel> BuildPartitionedModel(
    const petra::v1::JobSpec& resolved);

}  // namespace petra::client

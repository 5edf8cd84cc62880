// A Profile estimated from a network's FLOPs instead of measured: what
// `petra simulate --arch ...` simulates when no device is at hand.
#pragma once

#include <cstdint>

#include "client/model_flags.h"
#include "petra/v1/job.pb.h"
#include "petra/v1/profile.pb.h"

namespace petra::client {

// Per stage, for micro-batches of `micro_batch` samples on a device doing
// `flops_per_second`: forward = forward FLOPs x micro_batch / rate;
// backward = 3 x forward (rebuild or recompute, then a backward of about two
// forwards); stored-graph backward = 2 x forward. Message bytes are float32
// activations (a reversible pair counts both streams); stage 0's input is
// the data. source = "estimated".
petra::v1::Profile EstimateProfile(const petra::v1::JobSpec& resolved,
                                   const PartitionedModel& model,
                                   int64_t micro_batch,
                                   double flops_per_second);

}  // namespace petra::client

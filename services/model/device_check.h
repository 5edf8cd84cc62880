// Whether this process can place a stage on a device (torch is asked, so the
// answer reflects the libtorch this binary links: Debian's is CPU-only).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace petra::model {

// OK when `device` ("cpu", "cuda", "cuda:N") parses and exists here;
// INVALID_ARGUMENT naming `field` when it does not parse; UNAVAILABLE when
// it names a CUDA device this build or machine does not have.
absl::Status CheckDeviceAvailable(const std::string& device,
                                  const std::string& field);

// "CPU" or "CUDA (N devices)": what this libtorch build can use.
std::string DescribeComputeBackend();

}  // namespace petra::model

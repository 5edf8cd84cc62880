// Device strings in job specs and flags: "cpu", "cuda", "cuda:N". Parsed
// without torch so a spec is checked before any stage is placed.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace petra::catalog {

struct DeviceName {
  enum class Type { kCpu, kCuda };
  Type type = Type::kCpu;
  // CUDA ordinal; -1 means "the current device" for plain "cuda".
  int index = -1;
};

// INVALID_ARGUMENT naming `field` for anything else (e.g. "gpu", "cuda:x").
absl::StatusOr<DeviceName> ParseDeviceName(const std::string& text,
                                           const std::string& field);

// Whether a stage the job places on `requested` may run on a server started
// with `--device served`: the same kind, and the same ordinal unless the job
// says plain "cuda" (any GPU); a server on plain "cuda" runs on GPU 0.
// Unparseable names match nothing.
bool DeviceServes(const std::string& served, const std::string& requested);

}  // namespace petra::catalog

// Reading a small text file given on the command line (a job spec, a
// profile): a file past `max_bytes` is refused after reading one byte more,
// so /dev/zero or a huge file is never read whole.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace petra::base {

// The file's contents. Errors start with `path`: NOT_FOUND, PERMISSION_DENIED,
// or INVALID_ARGUMENT (read error; larger than `max_bytes`, "too large for
// <what>").
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          int64_t max_bytes,
                                          const std::string& what);

}  // namespace petra::base

// Checks of directories given on the command line.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace petra::cli {

// Creates `path` (and its parents) when missing and checks it is a writable
// directory. FAILED_PRECONDITION naming `flag` and the OS error otherwise.
absl::Status EnsureWritableDirectory(const std::string& path,
                                     const std::string& flag);

// Checks that `path` is an existing readable directory.
absl::Status CheckReadableDirectory(const std::string& path,
                                    const std::string& flag);

}  // namespace petra::cli

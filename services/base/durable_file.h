// Files that must survive a crash whole: checkpoints and their checksums.
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/status.h"

namespace petra::base {

// Lowercase hex SHA-256 of `bytes`.
std::string Sha256Hex(const std::string& bytes);

// Temporary file, fsync, rename: a crash leaves the old file or the new one,
// never a torn one. Creates the parent directories.
absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                 const std::string& bytes);

}  // namespace petra::base

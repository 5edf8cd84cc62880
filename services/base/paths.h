// Checks of directories given on the command line.
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace petra::base {

// Creates `path` (and its parents) when missing and checks it is a writable
// directory. FAILED_PRECONDITION naming `flag` and the OS error otherwise.
absl::Status EnsureWritableDirectory(const std::string& path,
                                     const std::string& flag);

// Checks that `path` is an existing readable directory.
absl::Status CheckReadableDirectory(const std::string& path,
                                    const std::string& flag);

// Whether ConfinedPath accepts an absolute path that lies inside the root.
enum class AbsolutePath { kRefuse, kAllowInsideRoot };

// The one gate for a path a client sent (a dataset path, a checkpoint name,
// a job id used as a directory): `relative` joined to `root`, made absolute
// and resolved (symbolic links followed, std::filesystem::weakly_canonical).
// INVALID_ARGUMENT naming `field` when it is empty, holds a NUL, has a ".."
// component, is absolute (unless `absolute` allows it inside the root), or
// resolves outside `root`, e.g. through a symbolic link. The error does not
// print the server's directories. FAILED_PRECONDITION when `root` itself
// cannot be resolved.
absl::StatusOr<std::filesystem::path> ConfinedPath(
    const std::string& root, const std::string& relative,
    const std::string& field, AbsolutePath absolute = AbsolutePath::kRefuse);

}  // namespace petra::base

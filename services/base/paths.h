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

// Removes `path` and everything under it, not following symbolic links;
// OK when it does not exist. The error names the first entry that could not
// be removed. Not std::filesystem::remove_all: a pip wheel's libtorch
// exports its own copy of libstdc++'s directory iterators (pytorch issue
// 133437), and on the GPU hosts of 2026-11-27 and 2026-11-28 every
// remove_all in a process that loads it called through a null pointer
// (docs/GPU.md). tests/cmake/check_layers.sh keeps remove_all out.
absl::Status RemoveTree(const std::filesystem::path& path);

// Whether ConfinedPath accepts an absolute path that lies inside the root.
enum class AbsolutePath { kRefuse, kAllowInsideRoot };

// The one gate for a path a client sent (a dataset path, a checkpoint name,
// a job id used as a directory): `relative` joined to `root`, made absolute
// and resolved (symbolic links followed, std::filesystem::weakly_canonical).
// INVALID_ARGUMENT naming `field` when it is empty, holds a NUL, has a ".."
// component, is absolute (unless `absolute` allows it inside the root), or
// resolves outside `root`, e.g. through a symbolic link. The error does not
// print the server's directories, only `root_name` (the flag that set it,
// e.g. "--data-root", so that its owner knows what to change).
// FAILED_PRECONDITION when `root` itself cannot be resolved.
absl::StatusOr<std::filesystem::path> ConfinedPath(
    const std::string& root, const std::string& relative,
    const std::string& field, AbsolutePath absolute = AbsolutePath::kRefuse,
    const std::string& root_name = "root directory");

}  // namespace petra::base

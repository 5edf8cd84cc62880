#include "services/cli/paths.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace petra::cli {

absl::Status EnsureWritableDirectory(const std::string& path,
                                     const std::string& flag) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": must not be empty"));
  }
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, ": cannot create directory \"", path, "\": ", ec.message()));
  }
  if (!std::filesystem::is_directory(path, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": \"", path, "\" is not a directory"));
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": directory \"", path, "\" is not writable"));
  }
  return absl::OkStatus();
}

absl::Status CheckReadableDirectory(const std::string& path,
                                    const std::string& flag) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": \"", path, "\" is not an existing directory"));
  }
  if (access(path.c_str(), R_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": directory \"", path, "\" is not readable"));
  }
  return absl::OkStatus();
}

}  // namespace petra::cli

#include "services/base/paths.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace petra::base {
namespace {

// nftw's callback has no user pointer; the first failure is kept here, per
// thread (RemoveTree may run on several threads at once).
thread_local std::string remove_tree_failure;

int RemoveEntry(const char* entry, const struct stat*, int type, struct FTW*) {
  // Depth first (FTW_DEPTH): a directory comes after what it holds.
  const int rc = (type == FTW_DP) ? rmdir(entry) : unlink(entry);
  if (rc != 0 && errno != ENOENT) {
    remove_tree_failure = absl::StrCat("\"", entry, "\": ", strerror(errno));
    return 1;  // stops the walk
  }
  return 0;
}

}  // namespace

absl::Status RemoveTree(const std::filesystem::path& path) {
  if (path.empty()) return absl::InvalidArgumentError("RemoveTree: no path");
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot remove \"", path.string(), "\": ", strerror(errno)));
  }
  remove_tree_failure.clear();
  // FTW_PHYS: a link is removed, never followed; 16 descriptors at most.
  const int rc = nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc == 0) return absl::OkStatus();
  if (remove_tree_failure.empty()) {
    remove_tree_failure =
        absl::StrCat("\"", path.string(), "\": ", strerror(errno));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot remove ", remove_tree_failure));
}

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

absl::StatusOr<std::filesystem::path> ConfinedPath(const std::string& root,
                                                   const std::string& relative,
                                                   const std::string& field,
                                                   AbsolutePath absolute,
                                                   const std::string& root_name) {
  namespace fs = std::filesystem;
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " \"", absl::CHexEscape(relative), "\": ", why));
  };
  if (relative.empty()) return refuse("must not be empty");
  if (relative.find('\0') != std::string::npos) {
    return refuse("may not contain a NUL character");
  }
  const fs::path given(relative);
  for (const fs::path& part : given) {
    if (part == "..") return refuse("may not contain \"..\"");
  }
  if (given.is_absolute() && absolute == AbsolutePath::kRefuse) {
    return refuse("must be a relative path, not an absolute one");
  }
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec || root.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": the server's directory cannot be resolved: ",
                     ec ? ec.message() : std::string("it is not set")));
  }
  const fs::path resolved =
      fs::weakly_canonical(given.is_absolute() ? given : base / given, ec);
  if (ec) return refuse(absl::StrCat("cannot be resolved: ", ec.message()));
  // Lexical after canonicalisation: "." is the root itself, anything that
  // starts with ".." (or has another root) is outside it.
  const fs::path inside = resolved.lexically_relative(base);
  if (inside.empty() || *inside.begin() == "..") {
    return refuse(given.is_absolute()
                      ? absl::StrCat("is outside the server's ", root_name)
                      : absl::StrCat("resolves outside the server's ",
                                     root_name, " (through a symbolic link)"));
  }
  return resolved;
}

}  // namespace petra::base

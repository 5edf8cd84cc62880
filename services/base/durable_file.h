// Files that must survive a crash whole: checkpoints and their checksums.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct evp_md_ctx_st;

namespace petra::base {

// Lowercase hex SHA-256 of `bytes`.
std::string Sha256Hex(const std::string& bytes);
// The same of a file's contents, read a megabyte at a time; NOT_FOUND
// ("<name> is missing") when there is no such file.
absl::StatusOr<std::string> Sha256OfFile(const std::filesystem::path& file);

// A file written in pieces that appears whole or not at all: the pieces go
// to "<path>.tmp" as they come (nothing is held in memory), its size and
// SHA-256 kept as it grows; Commit syncs it and renames it into place. A
// writer destroyed before Commit removes the temporary file.
class AtomicFile {
 public:
  // Creates the parent directories and the temporary file.
  static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(
      const std::filesystem::path& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends; the first failure (a full disk, above all) is kept and
  // returned by every later call, Commit included.
  absl::Status Append(const char* data, size_t size);
  absl::Status Commit();

  // The first failure (OK while there was none).
  const absl::Status& status() const { return status_; }
  uint64_t size() const { return size_; }
  // Lowercase hex SHA-256 of what was appended (after Commit).
  const std::string& sha256() const { return sha256_; }

 private:
  AtomicFile(std::filesystem::path path, std::string tmp, int fd);
  absl::Status Fail(const std::string& what, int error);

  const std::filesystem::path path_;
  const std::string tmp_;
  int fd_ = -1;
  evp_md_ctx_st* hash_ = nullptr;
  uint64_t size_ = 0;
  std::string sha256_;
  absl::Status status_;
  bool committed_ = false;
};

// Temporary file, fsync, rename: a crash leaves the old file or the new one,
// never a torn one. Creates the parent directories.
absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                 const std::string& bytes);

}  // namespace petra::base

#include "services/base/durable_file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace petra::base {

namespace {

std::string Hex(const unsigned char* digest, unsigned int n) {
  std::string hex;
  for (unsigned int i = 0; i < n; ++i)
    hex += absl::StrFormat("%02x", digest[i]);
  return hex;
}

}  // namespace

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  return Hex(digest, n);
}

absl::StatusOr<std::string> Sha256OfFile(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat(file.filename().string(), " is missing"));
    }
    return absl::InternalError(absl::StrCat("cannot read ", file.string(), ": ",
                                            std::strerror(errno)));
  }
  EVP_MD_CTX* hash = EVP_MD_CTX_new();
  EVP_DigestInit_ex(hash, EVP_sha256(), nullptr);
  std::vector<char> buffer(1 << 20);
  ssize_t n = 0;
  while ((n = ::read(fd, buffer.data(), buffer.size())) > 0 ||
         (n < 0 && errno == EINTR)) {
    if (n > 0) EVP_DigestUpdate(hash, buffer.data(), static_cast<size_t>(n));
  }
  const int error = errno;
  ::close(fd);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(hash, digest, &size);
  EVP_MD_CTX_free(hash);
  if (n < 0) {
    return absl::DataLossError(absl::StrCat("cannot read ", file.string(), ": ",
                                            std::strerror(error)));
  }
  return Hex(digest, size);
}

AtomicFile::AtomicFile(std::filesystem::path path, std::string tmp, int fd)
    : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {
  hash_ = EVP_MD_CTX_new();
  EVP_DigestInit_ex(hash_, EVP_sha256(), nullptr);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
  EVP_MD_CTX_free(hash_);
}

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(
    const std::filesystem::path& path) {
  std::error_code ec;
  // A bare file name has no parent to create (it goes in the working
  // directory).
  if (!path.parent_path().empty()) {
    std::filesystem::create_directories(path.parent_path(), ec);
  }
  if (ec) {
    return absl::InternalError(absl::StrCat(
        "cannot create ", path.parent_path().string(), ": ", ec.message()));
  }
  std::string tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<AtomicFile>(new AtomicFile(path, std::move(tmp), fd));
}

absl::Status AtomicFile::Fail(const std::string& what, int error) {
  if (status_.ok()) {
    status_ =
        absl::InternalError(absl::StrCat(what, ": ", std::strerror(error)));
  }
  return status_;
}

absl::Status AtomicFile::Append(const char* data, size_t size) {
  if (!status_.ok()) return status_;
  if (committed_) return absl::FailedPreconditionError("file committed");
  EVP_DigestUpdate(hash_, data, size);
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd_, data + written, size - written);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return Fail(absl::StrCat("writing ", tmp_), n < 0 ? errno : ENOSPC);
    }
    written += static_cast<size_t>(n);
  }
  size_ += size;
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (!status_.ok()) return status_;
  if (::fsync(fd_) != 0) return Fail(absl::StrCat("writing ", tmp_), errno);
  ::close(fd_);
  fd_ = -1;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return Fail(absl::StrCat("cannot complete ", path_.string()), errno);
  }
  committed_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(hash_, digest, &n);
  sha256_ = Hex(digest, n);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                 const std::string& bytes) {
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  if (absl::Status s = (*file)->Append(bytes.data(), bytes.size()); !s.ok()) {
    return s;
  }
  return (*file)->Commit();
}

}  // namespace petra::base

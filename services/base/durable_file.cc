#include "services/base/durable_file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace petra::base {

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i)
    hex += absl::StrFormat("%02x", digest[i]);
  return hex;
}

absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                 const std::string& bytes) {
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
  const std::string tmp = path.string() + ".tmp";
  // A failure says why (a full disk, above all) and leaves no partial file
  // behind to fill the disk further.
  auto failed = [&](const std::string& what, int error) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(what, ": ", std::strerror(error)));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return failed(absl::StrCat("cannot write ", tmp), errno);
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return failed(absl::StrCat("writing ", tmp), error);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    return failed(absl::StrCat("writing ", tmp), error);
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return failed(absl::StrCat("cannot complete ", path.string()), errno);
  }
  return absl::OkStatus();
}

}  // namespace petra::base

#include "services/base/small_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace petra::base {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          int64_t max_bytes,
                                          const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string why = std::strerror(err);
    if (err == ENOENT)
      return absl::NotFoundError(absl::StrCat(path, ": ", why));
    if (err == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": ", why));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  }
  // In pieces, growing as the file does: the limit may be far above what
  // files usually hold (an image folder reads many small files), and a
  // buffer of the limit's size would be allocated and cleared each time.
  std::string text;
  char piece[1 << 16];
  while (static_cast<int64_t>(text.size()) <= max_bytes) {
    in.read(piece, sizeof(piece));
    text.append(piece, static_cast<size_t>(in.gcount()));
    if (!in) break;
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": read error (", std::strerror(errno), ")"));
  }
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": larger than ", max_bytes, " bytes, too large for ", what));
  }
  return text;
}

}  // namespace petra::base

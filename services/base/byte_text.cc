#include "services/base/byte_text.h"

#include "absl/strings/str_format.h"

namespace petra::base {

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) {
    return absl::StrFormat("%.1f GB", bytes / 1e9);
  }
  return absl::StrFormat("%.0f MB", bytes / 1e6);
}

}  // namespace petra::base

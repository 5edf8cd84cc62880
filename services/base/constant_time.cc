#include "services/base/constant_time.h"

#include <algorithm>

namespace petra::base {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Every byte of the longer one is visited whatever the contents.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace petra::base

#include "services/base/utf8.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace petra::base {

size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

bool IsUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ReplaceInvalidUtf8(absl::string_view s, size_t* replaced) {
  std::string out;
  out.reserve(s.size());
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++bad;
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  if (replaced != nullptr) *replaced = bad;
  return out;
}

namespace {

bool Hidden(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return true;
  switch (cp) {
    case 0x00AD:
    case 0x061C:
    case 0x180E:
    case 0x200E:
    case 0x200F:
    case 0x2028:
    case 0x2029:
    case 0xFEFF:
      return true;
    default:
      break;
  }
  return (cp >= 0x200B && cp <= 0x200D) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::optional<uint32_t> FirstHiddenCodePoint(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      ++i;
      continue;
    }
    uint32_t cp = static_cast<unsigned char>(s[i]);
    if (n > 1) {
      cp &= 0x7F >> n;
      for (size_t k = 1; k < n; ++k) {
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      }
    }
    if (Hidden(cp)) return cp;
    i += n;
  }
  return std::nullopt;
}

std::string CodePointName(uint32_t cp) { return absl::StrFormat("U+%04X", cp); }

}  // namespace petra::base

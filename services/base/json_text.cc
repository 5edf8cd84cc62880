#include "services/base/json_text.h"

#include "absl/strings/str_format.h"
#include "services/base/utf8.h"

namespace petra::base {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += absl::StrFormat("\\u%04x", c);
        } else if (c >= 0x80) {
          const size_t n = Utf8SequenceLength(s, i);
          if (n == 0) {
            out += "\xEF\xBF\xBD";  // U+FFFD
            ++i;
          } else {
            out.append(s.data() + i, n);
            i += n;
          }
          continue;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

}  // namespace petra::base

// JSON string literals for the few outputs written by hand (reports whose
// numbers must stay numbers, which protobuf's JSON printer would quote for
// 64-bit fields). Names come from users: quotes, backslashes, control
// characters and non-ASCII text must survive a round trip.
#ifndef PETRA_SERVICES_BASE_JSON_TEXT_H_
#define PETRA_SERVICES_BASE_JSON_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace petra::base {

// `s` as a quoted JSON string: `"` and `\` escaped, control characters as
// \n, \t or \u00XX, valid UTF-8 kept as it is, and each byte of invalid
// UTF-8 replaced by U+FFFD (JSON text must be Unicode).
std::string JsonString(absl::string_view s);

}  // namespace petra::base

#endif  // PETRA_SERVICES_BASE_JSON_TEXT_H_

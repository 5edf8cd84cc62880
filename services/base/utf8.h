// UTF-8 well-formedness, for text users give us: proto3 strings must be
// UTF-8 (job specs are validated with it) and so must JSON text (the
// hand-written reports replace what is not).
#ifndef PETRA_SERVICES_BASE_UTF8_H_
#define PETRA_SERVICES_BASE_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace petra::base {

// Length of the well-formed UTF-8 sequence starting at s[i] (1 for ASCII),
// or 0 where none starts: overlong forms, surrogates, code points past
// U+10FFFF, stray continuation bytes and truncated sequences are not.
size_t Utf8SequenceLength(absl::string_view s, size_t i);

bool IsUtf8(absl::string_view s);

// `s` with each byte that starts no well-formed sequence replaced by
// U+FFFD; `replaced` (if given) counts them.
std::string ReplaceInvalidUtf8(absl::string_view s, size_t* replaced = nullptr);

}  // namespace petra::base

#endif  // PETRA_SERVICES_BASE_UTF8_H_

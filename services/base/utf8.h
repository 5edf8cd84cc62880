// UTF-8 well-formedness, for text users give us: proto3 strings must be
// UTF-8 (job specs are validated with it) and so must JSON text (the
// hand-written reports replace what is not).
#ifndef PETRA_SERVICES_BASE_UTF8_H_
#define PETRA_SERVICES_BASE_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <optional>
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

// The first code point of `s` that a name people read must not hold, or
// none: controls (C0, DEL, C1), bidirectional controls (U+061C, U+200E,
// U+200F, U+202A to U+202E, U+2066 to U+2069), the line and paragraph
// separators (U+2028, U+2029) and invisible formatting (U+00AD, U+180E,
// U+200B to U+200D, U+2060 to U+2064, U+FEFF). Such characters make one
// name print as another or break a log line in two. Bytes that are not
// UTF-8 are skipped (IsUtf8 is the check for them).
std::optional<uint32_t> FirstHiddenCodePoint(absl::string_view s);

// "U+202E" for 0x202E.
std::string CodePointName(uint32_t cp);

}  // namespace petra::base

#endif  // PETRA_SERVICES_BASE_UTF8_H_

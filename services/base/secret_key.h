// Random secrets a process hands out (a job's data keys): 32 bytes from
// OpenSSL's generator, as 64 lowercase hex digits, so they travel as HTTP/2
// header values and JSON text unchanged.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace petra::base {

inline constexpr size_t kSecretKeyLength = 64;

// A fresh key; aborts if the system has no randomness to give (there is no
// safe key without it).
std::string NewSecretKey();

// Whether `text` has the form of a key NewSecretKey makes.
bool IsSecretKey(absl::string_view text);

}  // namespace petra::base

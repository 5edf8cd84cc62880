// Comparing secrets (tokens, password hashes) in time that depends only on
// their lengths, not on where they differ.
#pragma once

#include <string>

namespace petra::base {

bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace petra::base

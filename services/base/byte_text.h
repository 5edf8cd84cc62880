// Byte counts as people read them in messages: "1.5 GB", "312 MB".
#pragma once

#include <cstdint>
#include <string>

namespace petra::base {

// Decimal units: GB from 2^30 bytes up, MB below.
std::string Bytes(int64_t bytes);

}  // namespace petra::base

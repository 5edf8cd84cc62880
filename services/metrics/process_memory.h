// Resident set size of this process, for status and metrics.
#pragma once

#include <cstdint>

namespace petra::metrics {

// Bytes resident now (from /proc/self/statm); 0 when it cannot be read.
int64_t ProcessRssBytes();

}  // namespace petra::metrics

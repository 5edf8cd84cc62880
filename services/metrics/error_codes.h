// Error counters by gRPC code: one label value per canonical code, every
// one created at zero so a dashboard's rate() sees the series before the
// first error (and the label set is the 16 codes, no more).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>

#include "absl/status/status.h"

namespace petra::metrics {

// {"code", "INVALID_ARGUMENT"}: gRPC's spelling of the code.
prometheus::Labels ErrorCodeLabel(absl::StatusCode code);

// Creates the series of every non-OK code at zero.
void AddErrorCodes(prometheus::Family<prometheus::Counter>& family);

}  // namespace petra::metrics

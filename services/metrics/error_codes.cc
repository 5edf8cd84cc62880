#include "services/metrics/error_codes.h"

#include "absl/strings/ascii.h"

namespace petra::metrics {

prometheus::Labels ErrorCodeLabel(absl::StatusCode code) {
  const int n = static_cast<int>(code);
  const absl::StatusCode known =
      n >= 1 && n <= 16 ? code : absl::StatusCode::kUnknown;
  // absl spells them "INVALID_ARGUMENT", like gRPC, upper-cased here for
  // the few it writes in mixed case.
  return {{"code", absl::AsciiStrToUpper(absl::StatusCodeToString(known))}};
}

void AddErrorCodes(prometheus::Family<prometheus::Counter>& family) {
  for (int n = 1; n <= 16; ++n) {
    family.Add(ErrorCodeLabel(static_cast<absl::StatusCode>(n)));
  }
}

}  // namespace petra::metrics

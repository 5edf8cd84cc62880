#include "services/catalog/device_name.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace petra::catalog {

// Highest CUDA ordinal we accept; far above any single host's GPU count.
constexpr int kMaxCudaOrdinal = 1023;

absl::StatusOr<DeviceName> ParseDeviceName(const std::string& text,
                                           const std::string& field) {
  if (text == "cpu") return DeviceName{DeviceName::Type::kCpu, -1};
  if (text == "cuda") return DeviceName{DeviceName::Type::kCuda, -1};
  if (text.rfind("cuda:", 0) == 0) {
    int index;
    std::string digits = text.substr(5);
    // Digits only: SimpleAtoi alone would accept signs and spaces.
    if (!digits.empty() && digits.size() <= 4 &&
        digits.find_first_not_of("0123456789") == std::string::npos &&
        absl::SimpleAtoi(digits, &index) && index <= kMaxCudaOrdinal) {
      return DeviceName{DeviceName::Type::kCuda, index};
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": unknown device \"", text,
      "\" (expected cpu, cuda or cuda:N with N in 0..", kMaxCudaOrdinal, ")"));
}

bool DeviceServes(const std::string& served, const std::string& requested) {
  absl::StatusOr<DeviceName> s = ParseDeviceName(served, "served");
  absl::StatusOr<DeviceName> r = ParseDeviceName(requested, "requested");
  if (!s.ok() || !r.ok() || s->type != r->type) return false;
  if (r->index == -1) return true;  // any GPU will do
  // A server on plain "cuda" runs on the current device: GPU 0.
  return std::max(s->index, 0) == r->index;
}

}  // namespace petra::catalog

#include "services/model/device_check.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "services/catalog/device_name.h"

namespace petra::model {

absl::Status CheckDeviceAvailable(const std::string& device,
                                  const std::string& field) {
  absl::StatusOr<catalog::DeviceName> name =
      catalog::ParseDeviceName(device, field);
  if (!name.ok()) return name.status();
  if (name->type == catalog::DeviceName::Type::kCpu) return absl::OkStatus();
  if (!torch::cuda::is_available()) {
    return absl::UnavailableError(absl::StrCat(
        field, ": device \"", device,
        "\" requested, but this build's libtorch has no CUDA or no GPU is "
        "visible (rebuild with -DPETRA_WITH_CUDA=ON and a CUDA libtorch)"));
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (name->index >= count) {
    return absl::UnavailableError(absl::StrCat(field, ": device \"", device,
                                               "\" requested, but only ", count,
                                               " CUDA device(s) are visible"));
  }
  return absl::OkStatus();
}

std::string DescribeComputeBackend() {
  if (torch::cuda::is_available()) {
    return absl::StrCat("CUDA (", torch::cuda::device_count(), " devices)");
  }
  return "CPU";
}

}  // namespace petra::model

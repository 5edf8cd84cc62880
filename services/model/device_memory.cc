#include "services/model/device_memory.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "services/job/device_name.h"

#ifdef PETRA_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace petra::model {
namespace {

#ifdef PETRA_WITH_CUDA
// The CUDA ordinal `device` names, or -1 when it names no usable GPU.
int CudaIndex(const std::string& device) {
  absl::StatusOr<job::DeviceName> name = job::ParseDeviceName(device, "d");
  if (!name.ok() || name->type != job::DeviceName::Type::kCuda ||
      !torch::cuda::is_available()) {
    return -1;
  }
  return name->index >= 0 ? name->index : c10::cuda::current_device();
}
#endif

}  // namespace

DeviceMemory ReadDeviceMemory(const std::string& device) {
  DeviceMemory m;
#ifdef PETRA_WITH_CUDA
  const int index = CudaIndex(device);
  if (index < 0) return m;
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(index));
    // Element 0 of each stat array is the aggregate over the allocator's
    // pools (StatType::AGGREGATE).
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.reserved_bytes = stats.reserved_bytes[0].current;
    m.peak_allocated_bytes = stats.allocated_bytes[0].peak;
  } catch (const c10::Error&) {
    return DeviceMemory{};  // an unreadable device reports nothing
  }
#else
  (void)device;
#endif
  return m;
}

void ResetDeviceMemoryPeak(const std::string& device) {
#ifdef PETRA_WITH_CUDA
  const int index = CudaIndex(device);
  if (index < 0) return;
  try {
    c10::cuda::CUDACachingAllocator::resetPeakStats(
        static_cast<c10::DeviceIndex>(index));
  } catch (const c10::Error&) {
  }
#else
  (void)device;
#endif
}

absl::Status LimitDeviceMemory(const std::string& device, double fraction) {
  if (!(fraction > 0 && fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device memory fraction ", fraction, " is not in (0, 1]"));
  }
#ifdef PETRA_WITH_CUDA
  const int index = CudaIndex(device);
  if (index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", device, "\" is not a CUDA device visible here"));
  }
  try {
    c10::cuda::CUDACachingAllocator::setMemoryFraction(
        fraction, static_cast<c10::DeviceIndex>(index));
    c10::cuda::CUDACachingAllocator::emptyCache();
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError(
      absl::StrCat("cannot limit the memory of \"", device,
                   "\": this build has no CUDA (PETRA_WITH_CUDA)"));
#endif
}

}  // namespace petra::model

#include "services/model/device_memory.h"

#include <torch/torch.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/catalog/device_name.h"

#ifdef PETRA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace petra::model {
namespace {

#ifdef PETRA_WITH_CUDA
// The CUDA ordinal `device` names, or -1 when it names no usable GPU.
int CudaIndex(const std::string& device) {
  absl::StatusOr<catalog::DeviceName> name =
      catalog::ParseDeviceName(device, "d");
  if (!name.ok() || name->type != catalog::DeviceName::Type::kCuda ||
      !torch::cuda::is_available()) {
    return -1;
  }
  return name->index >= 0 ? name->index : c10::cuda::current_device();
}
#endif

// The first number in a file (0 when it holds none, or "max").
int64_t FirstNumber(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  if (!(in >> n)) return 0;
  return n;
}

// MemTotal of /proc/meminfo, in bytes.
int64_t MemTotal() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

}  // namespace

MemoryCapacity ReadMemoryCapacity(const std::string& device) {
  MemoryCapacity c;
#ifdef PETRA_WITH_CUDA
  if (const int index = CudaIndex(device); index >= 0) {
    try {
      c.bytes = static_cast<int64_t>(
          at::cuda::getDeviceProperties(index)->totalGlobalMem);
      c.source = absl::StrCat("cuda:", index, "'s memory");
    } catch (const c10::Error&) {
    }
    return c;
  }
#else
  (void)device;
#endif
  c.bytes = MemTotal();
  c.source = "the machine's memory";
  // A cgroup's limit: v2's memory.max, v1's memory.limit_in_bytes (a huge
  // number when unlimited).
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const int64_t limit = FirstNumber(path);
    if (limit > 0 && (c.bytes == 0 || limit < c.bytes)) {
      c.bytes = limit;
      c.source = absl::StrCat("its cgroup's limit, ", path);
    }
  }
  return c;
}

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
    // The caching allocator is made when the process first uses CUDA, and
    // refuses a fraction before that ("Allocator not initialized for
    // device"): a cap set before any stage ran (as the fleet test's, on
    // torch 2.11) makes it first, with one element.
    torch::empty({1}, torch::TensorOptions().device(
                          torch::kCUDA, static_cast<c10::DeviceIndex>(index)));
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

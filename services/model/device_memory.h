// What a device's memory allocator holds, read from the allocator itself
// (not from our own counters): the CUDA caching allocator on a GPU. The
// figures are the device's, shared by every stage that runs on it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace petra::model {

struct DeviceMemory {
  int64_t allocated_bytes = 0;       // in live tensors now
  int64_t reserved_bytes = 0;        // held by the caching allocator
  int64_t peak_allocated_bytes = 0;  // highest allocated since the last reset
};

// The figures of `device` ("cuda", "cuda:N"); all zero for "cpu", in a build
// without CUDA, or when the device cannot be read.
DeviceMemory ReadDeviceMemory(const std::string& device);

// Starts the device's peak over (a stage does when it is built; the figure is
// the device's, so stages sharing a GPU share it too).
void ResetDeviceMemoryPeak(const std::string& device);

// How much memory a stage on `device` may use: for "cpu" the least of the
// machine's (MemTotal) and the cgroup's limit (memory.max, v2 or v1); for a
// GPU its total memory. `source` says which.
struct MemoryCapacity {
  int64_t bytes = 0;  // 0: unknown
  std::string source;
};
MemoryCapacity ReadMemoryCapacity(const std::string& device);

// Caps what this process may allocate on `device` at `fraction` (0, 1] of
// its memory (the caching allocator's per-process fraction); beyond it an
// allocation fails as out of memory. UNIMPLEMENTED without CUDA.
absl::Status LimitDeviceMemory(const std::string& device, double fraction);

}  // namespace petra::model

// How many cores this process may use: the CPUs its affinity allows,
// bounded by a container's CPU quota (cgroup v2 cpu.max, or v1's CFS
// quota). std::thread::hardware_concurrency counts the host's, which in a
// pod limited to 2 CPUs on a 64-core node would start 64 busy threads.
#pragma once

#include <optional>
#include <string>

namespace petra::base {

// At least 1.
int UsableCores();

// The CPUs a cgroup v2 cpu.max line ("200000 100000", or "max 100000")
// grants, rounded up; nullopt for no limit or text that is not one.
std::optional<int> CpuMaxLimit(const std::string& cpu_max);

}  // namespace petra::base

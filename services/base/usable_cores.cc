#include "services/base/usable_cores.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

namespace petra::base {
namespace {

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us (-1: no limit).
std::optional<int> CfsLimit() {
  long long quota = 0, period = 0;
  std::istringstream q(FirstLine("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")),
      p(FirstLine("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  if (!(q >> quota) || !(p >> period) || quota <= 0 || period <= 0) {
    return std::nullopt;
  }
  return static_cast<int>(std::ceil(static_cast<double>(quota) / period));
}

}  // namespace

std::optional<int> CpuMaxLimit(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0 || quota == "max") {
    return std::nullopt;
  }
  long long q = 0;
  std::istringstream number(quota);
  if (!(number >> q) || q <= 0) return std::nullopt;
  return static_cast<int>(std::ceil(static_cast<double>(q) / period));
}

int UsableCores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  std::optional<int> limit = CpuMaxLimit(FirstLine("/sys/fs/cgroup/cpu.max"));
  if (!limit) limit = CfsLimit();
  if (limit) cores = std::min(cores, *limit);
  return std::max(1, cores);
}

}  // namespace petra::base

#include "services/metrics/process_memory.h"

#include <unistd.h>

#include <fstream>

namespace petra::metrics {

int64_t ProcessRssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace petra::metrics

#include "services/base/large_allocations.h"

#include <malloc.h>

namespace petra::base {

void KeepLargeAllocationsInHeap() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit (HEAP_MAX / 2).
  // A failing mallopt leaves glibc's defaults, which are only slower.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace petra::base

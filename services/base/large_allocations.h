// Process-wide malloc setting for programs that move tensors of megabytes
// every few milliseconds (stage servers, petra train, the benchmarks).
#pragma once

namespace petra::base {

// Serves allocations up to 32 MiB from the heap and keeps freed memory
// instead of returning it to the kernel. glibc's defaults mmap each large
// activation, message or gradient afresh and unmap it when freed, so every
// micro-batch paid for page faults and zeroing of fresh pages (measured:
// about a sixth of a pinned stage server's core). Threads other than the
// main one allocate from arenas of 64 MiB heaps, which glibc unmaps as soon
// as one empties whatever the trim threshold: a pad as large as a heap
// keeps them (the in-process runner's second epoch took 6 times the page
// faults of its first, 7% of its time, without it). The price is that the
// process's resident size stays at its peak.
void KeepLargeAllocationsInHeap();

}  // namespace petra::base

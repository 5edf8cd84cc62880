// Process-wide malloc setting for programs that move tensors of megabytes
// every few milliseconds (stage servers, petra train, the benchmarks).
#pragma once

namespace petra::base {

// Serves allocations up to 32 MiB from the heap and keeps freed memory
// instead of returning it to the kernel. glibc's defaults mmap each large
// activation, message or gradient afresh and unmap it when freed, so every
// micro-batch paid for page faults and zeroing of fresh pages (measured:
// about a sixth of a pinned stage server's core). Not covered: threads
// other than the main one allocate from arenas of 64 MiB heaps, which glibc
// unmaps as soon as one empties whatever the trim threshold. So torch work
// stays on long-lived threads (a stage server's executor, the in-process
// runner's stage threads): a thread per pass once made the in-process
// runner's second epoch take up to ten times the page faults of its first.
// M_TOP_PAD of a heap's size kept them too, but then a process over
// RLIMIT_DATA hung instead of failing "out of memory"
// (Memory.AStageHoldsOnlyItsBlocksOfANetworkLargerThanItsLimit), and
// M_ARENA_MAX 1 costs the fleet 3%. The price is that the process's
// resident size stays at its peak.
void KeepLargeAllocationsInHeap();

}  // namespace petra::base

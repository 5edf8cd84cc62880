// The host memory of CPU tensors, counted where it is allocated: a counting
// allocator laid over libtorch's CPU allocator (CountHostMemory) adds each
// tensor's bytes to the process's account and to the account of the thread
// that allocated it (ScopedHostAccount), and takes them back when the
// tensor's memory is freed, on whatever thread. A stage's executor runs
// under its stage's account, so a CPU stage has what a GPU stage has from
// its caching allocator: the bytes of its live tensors and their peak,
// measured, not estimated. No torch in this header.
#pragma once

#include <atomic>
#include <cstdint>

namespace petra::model {

class HostMemoryAccount {
 public:
  // Never freed: a tensor may outlive whoever made the account, and its
  // memory is given back to the account when it goes.
  static HostMemoryAccount* Create();

  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // The peak starts over from what is live now.
  void ResetPeak() { peak_.store(bytes(), std::memory_order_relaxed); }
  // The peak is at least `bytes` (a peak set aside by ResetPeak, back).
  void RaisePeak(int64_t bytes);

  void Add(int64_t n);
  void Remove(int64_t n) { bytes_.fetch_sub(n, std::memory_order_relaxed); }

 private:
  HostMemoryAccount() = default;
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> peak_{0};
};

// An account's peak inside windows (a stage's training passes) apart from
// its peak overall, which it keeps. While a window is open the account's
// own peak is the window's; the peak before it waits here. Open and Close
// from one thread; the readers from any.
class WindowedPeak {
 public:
  explicit WindowedPeak(HostMemoryAccount* account) : account_(account) {}
  void Open();
  void Close();
  // The highest bytes ever, and the highest inside any window.
  int64_t peak() const;
  int64_t window_peak() const;

 private:
  HostMemoryAccount* const account_;
  std::atomic<bool> open_{false};
  std::atomic<int64_t> outside_{0};
  std::atomic<int64_t> inside_{0};
};

// Lays the counting allocator over libtorch's CPU allocator, once per
// process (later calls do nothing). Tensors allocated before count nowhere.
void CountHostMemory();
// Whether CountHostMemory ran in this process.
bool CountingHostMemory();

// Every CPU tensor this process allocated since CountHostMemory.
HostMemoryAccount& ProcessHostMemory();

// While alive, this thread's CPU allocations count to `account` as well as
// to the process's (nullptr: to the process's only).
class ScopedHostAccount {
 public:
  explicit ScopedHostAccount(HostMemoryAccount* account);
  ~ScopedHostAccount();
  ScopedHostAccount(const ScopedHostAccount&) = delete;
  ScopedHostAccount& operator=(const ScopedHostAccount&) = delete;

 private:
  HostMemoryAccount* previous_;
};

}  // namespace petra::model

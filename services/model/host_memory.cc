#include "services/model/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace petra::model {
namespace {

thread_local HostMemoryAccount* current_account = nullptr;

// Who each live allocation's bytes go back to, by its address. A table
// beside the memory, not a header in it: the allocator keeps libtorch's
// raw interface (oneDNN allocates and frees through it, with pointers
// that must be the memory itself), and memory allocated before the
// counting began is freed through it too, found in no table.
struct Entry {
  HostMemoryAccount* account;
  size_t bytes;
};
struct Shard {
  std::mutex mu;
  std::unordered_map<void*, Entry> live;
};
constexpr size_t kShards = 64;
Shard shards[kShards];

Shard& ShardOf(void* p) {
  return shards[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards];
}

c10::Allocator* base = nullptr;
c10::DeleterFnPtr base_delete = nullptr;
std::atomic<bool> counting{false};

void Delete(void* p) {
  Shard& shard = ShardOf(p);
  std::optional<Entry> e;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.live.find(p);
    if (it != shard.live.end()) {
      e = it->second;
      shard.live.erase(it);
    }
  }
  if (e) {
    ProcessHostMemory().Remove(static_cast<int64_t>(e->bytes));
    if (e->account != nullptr) {
      e->account->Remove(static_cast<int64_t>(e->bytes));
    }
  }
  base_delete(p);
}

// Both allocate()s: libtorch 1.13's is const, 2.x's is not; each overrides
// its own and leaves the other an ordinary member.
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const { return Allocate(n); }
  c10::DataPtr allocate(size_t n) { return Allocate(n); }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  // libtorch 2.x's; a plain copy, as the CPU allocator's own.
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }

 private:
  static c10::DataPtr Allocate(size_t n) {
    void* p = base->raw_allocate(n);
    if (p != nullptr) {
      HostMemoryAccount* account = current_account;
      {
        Shard& shard = ShardOf(p);
        std::lock_guard<std::mutex> lock(shard.mu);
        shard.live[p] = {account, n};
      }
      ProcessHostMemory().Add(static_cast<int64_t>(n));
      if (account != nullptr) account->Add(static_cast<int64_t>(n));
    }
    return {p, p, &Delete, c10::Device(c10::DeviceType::CPU)};
  }
};

}  // namespace

HostMemoryAccount* HostMemoryAccount::Create() {
  return new HostMemoryAccount();
}

void HostMemoryAccount::Add(int64_t n) {
  RaisePeak(bytes_.fetch_add(n, std::memory_order_relaxed) + n);
}

void HostMemoryAccount::RaisePeak(int64_t bytes) {
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (bytes > peak &&
         !peak_.compare_exchange_weak(peak, bytes, std::memory_order_relaxed)) {
  }
}

void WindowedPeak::Open() {
  outside_ = std::max(outside_.load(), account_->peak());
  account_->ResetPeak();
  open_.store(true, std::memory_order_release);
}

void WindowedPeak::Close() {
  inside_ = std::max(inside_.load(), account_->peak());
  open_.store(false, std::memory_order_release);
  account_->RaisePeak(outside_.load());
}

int64_t WindowedPeak::peak() const {
  return std::max(account_->peak(), outside_.load());
}

int64_t WindowedPeak::window_peak() const {
  const bool open = open_.load(std::memory_order_acquire);
  return std::max(inside_.load(), open ? account_->peak() : int64_t{0});
}

HostMemoryAccount& ProcessHostMemory() {
  static HostMemoryAccount* process = HostMemoryAccount::Create();
  return *process;
}

void CountHostMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
    base = c10::GetCPUAllocator();
    base_delete = base->raw_deleter();
    // An allocator whose memory cannot be freed by a plain function (none
    // of libtorch's CPU ones) is left alone: nothing is counted.
    if (base_delete == nullptr) return;
    static CountingAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    counting = true;
  });
}

bool CountingHostMemory() { return counting; }

ScopedHostAccount::ScopedHostAccount(HostMemoryAccount* account)
    : previous_(current_account) {
  current_account = account;
}

ScopedHostAccount::~ScopedHostAccount() { current_account = previous_; }

}  // namespace petra::model

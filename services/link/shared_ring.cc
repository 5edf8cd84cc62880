#include "services/link/shared_ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace petra::link {
namespace {

constexpr uint64_t kMagic = 0x474e495241525450;  // "PTRARING"
constexpr uint32_t kVersion = 2;                 // 2: the medium
// Media a receiver knows (IpcKind's values; 0: the payload in the slots).
constexpr uint32_t kLastMedium = 2;
constexpr uint64_t kLine = 64;
constexpr uint64_t kPage = 4096;
constexpr uint32_t kFree = 0, kFull = 1;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::string Errno(const char* what, const std::string& name) {
  return absl::StrCat(what, " ", name, ": ", std::strerror(errno));
}

// The pid namespace's inode: pids name processes only within it.
std::string PidNamespace() {
  char buf[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  std::string digits;
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] >= '0' && buf[i] <= '9') digits += buf[i];
  }
  return digits.empty() ? "0" : digits;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, long nanos) {
  timespec t{0, nanos};
  // Not FUTEX_PRIVATE: the word is shared with another process.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
          &t, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

uint64_t DataOffset(uint64_t slots) {
  return RoundUp(kLine + slots * kLine, kPage);
}

// "petra-<ns>-<pid>-<n>" -> ns and pid; false for other names.
bool ParseName(const std::string& file, std::string* ns, int* pid) {
  std::vector<std::string> parts = absl::StrSplit(file, '-');
  if (parts.size() != 4 || parts[0] != "petra") return false;
  *ns = parts[1];
  return absl::SimpleAtoi(parts[2], pid) && *pid > 0;
}

}  // namespace

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "slot states are shared between processes");

struct SharedRing::Header {
  std::atomic<uint64_t> magic;  // written last by the creator
  uint32_t version;
  uint32_t slot_count;
  uint64_t slot_bytes;
  uint64_t data_offset;
  std::atomic<uint32_t> opened;  // the receiver has mapped it
  uint32_t medium;
};

struct SharedRing::SlotState {
  std::atomic<uint32_t> state;
  uint32_t unused;
  std::atomic<uint64_t> sequence;
};

SharedRing::SharedRing(std::string name, bool creator, void* base,
                       uint64_t size)
    : name_(std::move(name)), creator_(creator), base_(base), size_(size) {
  static_assert(sizeof(Header) <= kLine, "the header fits its line");
  static_assert(sizeof(SlotState) <= kLine, "one line per slot");
}

SharedRing::~SharedRing() {
  const auto* h = static_cast<const Header*>(base_);
  const bool unread = creator_ && h->opened.load() == 0;
  munmap(base_, size_);
  // A ring the receiver never opened still has its name: nobody else will
  // unlink it.
  if (unread) shm_unlink(name_.c_str());
}

std::string RingNamePrefix() {
  // getpid() each time: a forked child must not make its parent's names.
  static const std::string ns = PidNamespace();
  return absl::StrCat("/petra-", ns, "-", getpid(), "-");
}

absl::StatusOr<std::unique_ptr<SharedRing>> SharedRing::Create(
    int slots, uint64_t slot_bytes, uint32_t medium) {
  if (slots < 1 || slots > kMaxRingSlots || slot_bytes == 0 ||
      slot_bytes > kMaxSlotBytes || medium > kLastMedium) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shared-memory ring needs 1 to ", kMaxRingSlots,
                     " slots of 1 byte to ", kMaxSlotBytes, " bytes, not ",
                     slots, " of ", slot_bytes, " (medium ", medium, ")"));
  }
  static std::atomic<uint64_t> counter{0};
  slot_bytes = RoundUp(slot_bytes, kLine);
  const uint64_t offset = DataOffset(slots);
  const uint64_t size = offset + slots * slot_bytes;
  std::string name;
  int fd = -1;
  // A name may be taken by a ring an earlier process of this pid left.
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    name = absl::StrCat(RingNamePrefix(), counter++);
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::UnavailableError(Errno("cannot create shared memory", name));
  }
  // Reserved now, so a full /dev/shm is an error here and not a SIGBUS on
  // the first write (docker gives containers 64 MiB unless --shm-size).
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(size)); e != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", size, " bytes of shared memory in /dev/shm for ",
        name, ": ", std::strerror(e),
        " (a container needs a larger /dev/shm: docker --shm-size, or the "
        "deploy files' shm volume; or use transport grpc)"));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(Errno("cannot map", name));
  }
  std::unique_ptr<SharedRing> ring(new SharedRing(name, true, base, size));
  auto* h = static_cast<Header*>(base);
  h->version = kVersion;
  h->slot_count = static_cast<uint32_t>(slots);
  h->slot_bytes = slot_bytes;
  h->data_offset = offset;
  h->opened.store(0);
  h->medium = medium;
  ring->slots_ = slots;
  ring->medium_ = medium;
  ring->slot_bytes_ = slot_bytes;
  ring->data_offset_ = offset;
  for (int i = 0; i < slots; ++i) {
    ring->state(i).state.store(kFree);
    ring->state(i).sequence.store(0);
  }
  h->magic.store(kMagic, std::memory_order_release);
  return ring;
}

absl::StatusOr<std::unique_ptr<SharedRing>> SharedRing::Open(
    const std::string& name) {
  std::string ns;
  int pid = 0;
  if (name.empty() || name[0] != '/' || name.size() > 200 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", 1) !=
          std::string::npos ||
      !ParseName(name.substr(1), &ns, &pid)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", name, "\" is not the name of a petra shared-memory ring"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(
        Errno("cannot open shared memory", name),
        " (the sender is on another host or sees another /dev/shm: use "
        "transport grpc)"));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kPage)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory ", name, " is too small to be a ring"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(Errno("cannot map", name));
  }
  std::unique_ptr<SharedRing> ring(new SharedRing(name, false, base, size));
  auto* h = static_cast<Header*>(base);
  const uint64_t slots = h->slot_count;
  const uint64_t bytes = h->slot_bytes;
  if (h->magic.load(std::memory_order_acquire) != kMagic ||
      h->version != kVersion || h->medium > kLastMedium || slots < 1 ||
      slots > kMaxRingSlots || bytes == 0 || bytes > kMaxSlotBytes ||
      bytes % kLine != 0 || h->data_offset != DataOffset(slots) ||
      size < h->data_offset + slots * bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory ", name, " does not hold a valid ring"));
  }
  ring->slots_ = static_cast<int>(slots);
  ring->slot_bytes_ = bytes;
  ring->data_offset_ = h->data_offset;
  ring->medium_ = h->medium;
  // Both ends have it mapped: the name is no longer needed.
  h->opened.store(1);
  shm_unlink(name.c_str());
  return ring;
}

SharedRing::SlotState& SharedRing::state(uint32_t index) const {
  return *reinterpret_cast<SlotState*>(static_cast<uint8_t*>(base_) + kLine +
                                       index * kLine);
}

uint8_t* SharedRing::data(uint32_t index) const {
  return static_cast<uint8_t*>(base_) + data_offset_ + index * slot_bytes_;
}

bool SharedRing::Idle() const {
  for (int i = 0; i < slots_; ++i) {
    if (state(i).state.load(std::memory_order_acquire) != kFree) return false;
  }
  return true;
}

absl::StatusOr<SharedRing::Lease> SharedRing::Acquire(
    const std::function<absl::Status()>& keep_going) {
  SlotState& s = state(next_);
  while (s.state.load(std::memory_order_acquire) != kFree) {
    FutexWait(&s.state, kFull, 50'000'000);
    if (s.state.load(std::memory_order_acquire) == kFree) break;
    if (keep_going) {
      if (absl::Status ok = keep_going(); !ok.ok()) return ok;
    }
  }
  Lease lease{next_, ++sequence_, data(next_)};
  s.sequence.store(lease.sequence, std::memory_order_relaxed);
  next_ = (next_ + 1) % static_cast<uint32_t>(slots_);
  return lease;
}

void SharedRing::Publish(const Lease& lease) {
  state(lease.index).state.store(kFull, std::memory_order_release);
}

absl::StatusOr<const uint8_t*> SharedRing::Read(uint32_t index,
                                                uint64_t sequence,
                                                uint64_t offset,
                                                uint64_t bytes) const {
  if (index >= static_cast<uint32_t>(slots_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot ", index, " of ring ", name_, ", which has ", slots_));
  }
  if (offset > slot_bytes_ || bytes > slot_bytes_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes, " bytes at ", offset, " overrun slot ", index,
                     " of ring ", name_, " (", slot_bytes_, " bytes)"));
  }
  const SlotState& s = state(index);
  if (s.state.load(std::memory_order_acquire) != kFull ||
      s.sequence.load(std::memory_order_relaxed) != sequence) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", index, " of ring ", name_,
                     " does not hold micro-batch "
                     "sequence ",
                     sequence, " (stale or repeated reference)"));
  }
  return data(index) + offset;
}

void SharedRing::Free(uint32_t index, uint64_t sequence) {
  if (index >= static_cast<uint32_t>(slots_)) return;
  SlotState& s = state(index);
  if (s.sequence.load(std::memory_order_relaxed) != sequence) return;
  s.state.store(kFree, std::memory_order_release);
  FutexWake(&s.state);
}

// Calls `f(file name, pid namespace, pid)` for every ring name in /dev/shm.
template <typename F>
void ForEachRingName(F f) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    std::string ns;
    int pid = 0;
    if (ParseName(e->d_name, &ns, &pid)) f(e->d_name, ns, pid);
  }
  closedir(dir);
}

int SweepOrphanRings() {
  const std::string own = PidNamespace();
  int swept = 0;
  ForEachRingName([&](const char* file, const std::string& ns, int pid) {
    if (ns != own || pid == getpid()) return;
    if (kill(pid, 0) != 0 && errno == ESRCH &&
        shm_unlink(absl::StrCat("/", file).c_str()) == 0) {
      ++swept;
    }
  });
  return swept;
}

int CountRingNames(int pid) {
  int n = 0;
  ForEachRingName([&](const char*, const std::string&, int owner) {
    if (owner == pid) ++n;
  });
  return n;
}

int CountRingMappings(int pid) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  std::set<std::string> rings;
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find("/dev/shm/petra-");
    if (at != std::string::npos) rings.insert(line.substr(at));
  }
  return static_cast<int>(rings.size());
}

}  // namespace petra::link

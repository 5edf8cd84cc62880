// The host stand-in for a device runtime: "device memory" is a memfd the
// sender maps, and the receiver maps the same file through
// /proc/<pid>/fd/<fd>, as a peer maps a cudaIpcMemHandle_t; events are
// tokens and copies are memcpy. Everything the protocol counts (regions,
// mappings, events, buffers) is counted here as the CUDA runtime's
// implementation counts it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "services/link/ipc_device.h"

namespace petra::link {
namespace {

constexpr uint64_t kRegionMagic = 0x4e4f474552505450;  // "PTPREGON"
constexpr uint64_t kEventMagic = 0x544e455645505450;   // "PTPEVENT"
constexpr char kMemfdName[] = "petra-ipc-stand-in";

struct HandleFields {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t bytes;
};
static_assert(sizeof(HandleFields) <= kIpcHandleBytes);

IpcHandle Pack(const HandleFields& f) {
  IpcHandle h{};
  std::memcpy(h.data(), &f, sizeof(f));
  return h;
}

HandleFields Unpack(const IpcHandle& h) {
  HandleFields f;
  std::memcpy(&f, h.data(), sizeof(f));
  return f;
}

class HostStandIn : public IpcDevice {
 public:
  IpcKind kind() const override { return IpcKind::kHostStandIn; }
  int current_device() const override { return -1; }

  absl::StatusOr<void*> Export(uint64_t bytes, IpcHandle* handle) override {
    const int fd = memfd_create(kMemfdName, MFD_CLOEXEC);
    if (fd < 0) return Errno("memfd_create");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      return Errno("ftruncate");
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return Errno("mmap");
    }
    *handle = Pack({kRegionMagic, getpid(), fd, bytes});
    std::lock_guard<std::mutex> lock(mu_);
    exported_[p] = {fd, bytes};
    ++counters_.exported_regions;
    return p;
  }

  void Unexport(void* region) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = exported_.find(region);
    if (it == exported_.end()) return;
    munmap(region, it->second.second);
    close(it->second.first);
    exported_.erase(it);
    --counters_.exported_regions;
  }

  absl::StatusOr<void*> CreateEvent(IpcHandle* handle) override {
    *handle = Pack({kEventMagic, getpid(), 0, 0});
    ++counters_.events;
    return new int(0);
  }
  void DestroyEvent(void* event) override {
    delete static_cast<int*>(event);
    --counters_.events;
  }
  absl::Status Copy(void* dst, const void* src, uint64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Record(void*) override { return absl::OkStatus(); }

  absl::StatusOr<void*> Map(const IpcHandle& handle) override {
    const HandleFields f = Unpack(handle);
    if (f.magic != kRegionMagic || f.pid <= 0 || f.fd < 0 || f.bytes == 0) {
      return absl::InvalidArgumentError("not a stand-in region handle");
    }
    const std::string path = absl::StrCat("/proc/", f.pid, "/fd/", f.fd);
    // Only a file the stand-in made: a forged handle maps nothing else.
    char target[128] = {};
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n < 0 || std::strncmp(target, "/memfd:petra-ipc-stand-in", 25) != 0) {
      return absl::NotFoundError(absl::StrCat("no stand-in region at ", path,
                                              " (the sender is gone "
                                              "or on another host)"));
    }
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return Errno("open");
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != f.bytes) {
      close(fd);
      return absl::InvalidArgumentError(
          "the region's size is not its handle's");
    }
    void* p = mmap(nullptr, f.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return Errno("mmap");
    std::lock_guard<std::mutex> lock(mu_);
    mapped_[p] = f.bytes;
    ++counters_.mapped_regions;
    return p;
  }

  void Unmap(void* region) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mapped_.find(region);
    if (it == mapped_.end()) return;
    munmap(region, it->second);
    mapped_.erase(it);
    --counters_.mapped_regions;
  }

  absl::StatusOr<void*> OpenEvent(const IpcHandle& handle) override {
    if (Unpack(handle).magic != kEventMagic) {
      return absl::InvalidArgumentError("not a stand-in event handle");
    }
    ++counters_.opened_events;
    return new int(0);
  }
  void CloseEvent(void* event) override {
    delete static_cast<int*>(event);
    --counters_.opened_events;
  }
  absl::Status Wait(void*) override { return absl::OkStatus(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void* Allocate(uint64_t bytes) override {
    void* p =
        std::aligned_alloc(64, (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64);
    if (p != nullptr) ++counters_.local_buffers;
    return p;
  }
  void Free(void* buffer) override {
    if (buffer == nullptr) return;
    std::free(buffer);
    --counters_.local_buffers;
  }

 private:
  static absl::Status Errno(const char* what) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the host stand-in: ", what, ": ", std::strerror(errno)));
  }

  std::mutex mu_;
  std::map<void*, std::pair<int, uint64_t>> exported_;  // fd, bytes
  std::map<void*, uint64_t> mapped_;
};

}  // namespace

IpcDevice& HostIpcDevice() {
  static HostStandIn* const device = new HostStandIn();
  return *device;
}

}  // namespace petra::link

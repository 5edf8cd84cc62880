// IpcDevice over the CUDA runtime (built with PETRA_WITH_CUDA; the compile
// check, scripts/cuda-compile-check.sh, builds it against Debian's CUDA
// headers on a CPU machine). Copies go on the legacy default stream, the
// stream libtorch queues its work on unless told otherwise: a copy out of a
// tensor runs after the kernels that wrote it, and the kernels that read a
// received tensor run after its copy in. CUDA maps no handle in the process
// that exported it: a receiver in the sender's own process (the transport
// benchmark, the conformance suite on a GPU) is given the memory and the
// event themselves.
#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/link/ipc_device.h"

namespace petra::link {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes &&
                  sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes,
              "CUDA's IPC handles are 64 bytes");

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const absl::StatusCode code = e == cudaErrorMemoryAllocation
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                         cudaGetErrorString(e), ")"));
}

class CudaRuntime : public IpcDevice {
 public:
  IpcKind kind() const override { return IpcKind::kCuda; }
  int current_device() const override {
    int device = 0;
    return cudaGetDevice(&device) == cudaSuccess ? device : 0;
  }
  void UseDevice(int device) override { cudaSetDevice(device); }

  absl::StatusOr<void*> Export(uint64_t bytes, IpcHandle* handle) override {
    void* p = nullptr;
    if (absl::Status s = Cuda(cudaMalloc(&p, bytes), "cudaMalloc"); !s.ok()) {
      return s;
    }
    cudaIpcMemHandle_t h;
    if (absl::Status s =
            Cuda(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
        !s.ok()) {
      cudaFree(p);
      return s;
    }
    std::memcpy(handle->data(), &h, kIpcHandleBytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      own_[*handle] = p;
    }
    ++counters_.exported_regions;
    return p;
  }
  void Unexport(void* region) override {
    Forget(region);
    if (cudaFree(region) == cudaSuccess) --counters_.exported_regions;
  }

  absl::StatusOr<void*> CreateEvent(IpcHandle* handle) override {
    cudaEvent_t e = nullptr;
    if (absl::Status s =
            Cuda(cudaEventCreateWithFlags(
                     &e, cudaEventDisableTiming | cudaEventInterprocess),
                 "cudaEventCreateWithFlags");
        !s.ok()) {
      return s;
    }
    cudaIpcEventHandle_t h;
    if (absl::Status s =
            Cuda(cudaIpcGetEventHandle(&h, e), "cudaIpcGetEventHandle");
        !s.ok()) {
      cudaEventDestroy(e);
      return s;
    }
    std::memcpy(handle->data(), &h, kIpcHandleBytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      own_[*handle] = e;
    }
    ++counters_.events;
    return static_cast<void*>(e);
  }
  void DestroyEvent(void* event) override {
    Forget(event);
    if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) == cudaSuccess) {
      --counters_.events;
    }
  }

  absl::Status Copy(void* dst, const void* src, uint64_t bytes) override {
    return Cuda(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamLegacy),
        "cudaMemcpyAsync");
  }
  absl::Status Record(void* event) override {
    return Cuda(
        cudaEventRecord(static_cast<cudaEvent_t>(event), cudaStreamLegacy),
        "cudaEventRecord");
  }

  absl::StatusOr<void*> Map(const IpcHandle& handle) override {
    if (void* own = Own(handle)) {
      ++counters_.mapped_regions;
      return own;
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), kIpcHandleBytes);
    void* p = nullptr;
    if (absl::Status s =
            Cuda(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                 "cudaIpcOpenMemHandle");
        !s.ok()) {
      return absl::FailedPreconditionError(s.message());
    }
    ++counters_.mapped_regions;
    return p;
  }
  void Unmap(void* region) override {
    if (Borrowed(region) || cudaIpcCloseMemHandle(region) == cudaSuccess) {
      --counters_.mapped_regions;
    }
  }

  absl::StatusOr<void*> OpenEvent(const IpcHandle& handle) override {
    if (void* own = Own(handle)) {
      ++counters_.opened_events;
      return own;
    }
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.data(), kIpcHandleBytes);
    cudaEvent_t e = nullptr;
    if (absl::Status s =
            Cuda(cudaIpcOpenEventHandle(&e, h), "cudaIpcOpenEventHandle");
        !s.ok()) {
      return absl::FailedPreconditionError(s.message());
    }
    ++counters_.opened_events;
    return static_cast<void*>(e);
  }
  void CloseEvent(void* event) override {
    if (Borrowed(event) ||
        cudaEventDestroy(static_cast<cudaEvent_t>(event)) == cudaSuccess) {
      --counters_.opened_events;
    }
  }
  absl::Status Wait(void* event) override {
    return Cuda(cudaStreamWaitEvent(cudaStreamLegacy,
                                    static_cast<cudaEvent_t>(event), 0),
                "cudaStreamWaitEvent");
  }
  absl::Status Synchronize() override {
    return Cuda(cudaStreamSynchronize(cudaStreamLegacy),
                "cudaStreamSynchronize");
  }

  void* Allocate(uint64_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) return nullptr;
    ++counters_.local_buffers;
    return p;
  }
  void Free(void* buffer) override {
    if (buffer != nullptr && cudaFree(buffer) == cudaSuccess) {
      --counters_.local_buffers;
    }
  }

 private:
  // This process's own region or event behind `handle`, or null; a
  // receiver given one borrows it (borrowed_ counts how many times).
  void* Own(const IpcHandle& handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = own_.find(handle);
    if (it == own_.end()) return nullptr;
    ++borrowed_[it->second];
    return it->second;
  }
  // True (and one borrow fewer) when `p` was borrowed, not mapped.
  bool Borrowed(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = borrowed_.find(p);
    if (it == borrowed_.end()) return false;
    if (--it->second == 0) borrowed_.erase(it);
    return true;
  }
  void Forget(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = own_.begin(); it != own_.end(); ++it) {
      if (it->second == p) {
        own_.erase(it);
        break;
      }
    }
  }

  std::mutex mu_;
  std::map<IpcHandle, void*> own_;  // exported here: regions and events
  std::map<void*, int> borrowed_;
};

}  // namespace

IpcDevice* CudaIpcDevice(std::string* why) {
  static std::once_flag once;
  static IpcDevice* device = nullptr;
  static std::string reason;
  std::call_once(once, [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      reason = absl::StrCat(
          "no GPU is visible to this process (",
          e == cudaSuccess ? "0 devices" : cudaGetErrorString(e), ")");
      return;
    }
    device = new CudaRuntime();
  });
  if (device == nullptr && why != nullptr) *why = reason;
  return device;
}

std::vector<GpuIdentity> VisibleGpus() {
  std::vector<GpuIdentity> gpus;
  if (CudaIpcDevice() == nullptr) return gpus;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) return {};
    static const char kHex[] = "0123456789abcdef";
    std::string uuid;
    for (unsigned char c : prop.uuid.bytes) {
      uuid += kHex[c >> 4];
      uuid += kHex[c & 15];
    }
    gpus.push_back({uuid, {}});
  }
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      int can = 0;
      if (i != j && cudaDeviceCanAccessPeer(&can, i, j) == cudaSuccess &&
          can != 0) {
        gpus[i].peers.push_back(gpus[j].uuid);
      }
    }
  }
  return gpus;
}

}  // namespace petra::link

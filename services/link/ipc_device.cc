#include "services/link/ipc_device.h"

namespace petra::link {

IpcCounts IpcDevice::counts() const {
  IpcCounts c;
  c.exported_regions = counters_.exported_regions.load();
  c.mapped_regions = counters_.mapped_regions.load();
  c.events = counters_.events.load();
  c.opened_events = counters_.opened_events.load();
  c.local_buffers = counters_.local_buffers.load();
  return c;
}

#ifndef PETRA_WITH_CUDA
IpcDevice* CudaIpcDevice(std::string* why) {
  if (why != nullptr) {
    *why = "this build has no CUDA (PETRA_WITH_CUDA=OFF)";
  }
  return nullptr;
}

std::vector<GpuIdentity> VisibleGpus() { return {}; }
#endif

IpcDevice* IpcDeviceOf(IpcKind kind) {
  switch (kind) {
    case IpcKind::kCuda:
      return CudaIpcDevice();
    case IpcKind::kHostStandIn:
      return &HostIpcDevice();
    default:
      return nullptr;
  }
}

}  // namespace petra::link

// Transport cuda_ipc through the CUDA runtime: a sender process puts device
// memory into a ring and a receiver process (this one) reads it into its
// own device memory, with no host copy on the way. CUDA cannot map a handle
// in the process that exported it, and a forked child cannot use CUDA, so
// the sender is this test binary run again, running this test with
// PETRA_CUDA_IPC_TEST_PIPES set.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/link/ipc_device.h"
#include "services/link/shared_ring_channel.h"

extern char** environ;

namespace petra::link {
namespace {

constexpr char kSenderPipes[] = "PETRA_CUDA_IPC_TEST_PIPES";
constexpr int kFloats = 1 << 20;

// The sender, in its own process: fills a device buffer with 0, 1, 2, ...,
// places it, names the slot on the pipe, and waits for the receiver's word
// before it lets the ring go.
void RunSender(const char* pipes) {
  std::vector<std::string> fds = absl::StrSplit(pipes, ',');
  int in = -1, out = -1;
  ASSERT_TRUE(absl::SimpleAtoi(fds.at(0), &in) &&
              absl::SimpleAtoi(fds.at(1), &out));
  IpcDevice* device = CudaIpcDevice();
  ASSERT_NE(device, nullptr);
  std::vector<float> host(kFloats);
  for (int i = 0; i < kFloats; ++i) host[i] = static_cast<float>(i);
  void* on_gpu = device->Allocate(host.size() * sizeof(float));
  ASSERT_NE(on_gpu, nullptr);
  ASSERT_TRUE(
      device->Copy(on_gpu, host.data(), host.size() * sizeof(float)).ok());
  ASSERT_TRUE(device->Synchronize().ok());
  {
    SharedRingPlacer placer({}, kRingSlots, false, 0, device);
    auto refs = placer.Place(
        {{on_gpu, host.size() * sizeof(float), device->current_device()}});
    ASSERT_TRUE(refs.ok()) << refs.status();
    const std::string msg = refs->front().SerializeAsString();
    const uint32_t n = static_cast<uint32_t>(msg.size());
    ASSERT_EQ(write(out, &n, sizeof(n)), static_cast<ssize_t>(sizeof(n)));
    ASSERT_EQ(write(out, msg.data(), n), static_cast<ssize_t>(n));
    char done = 0;
    ASSERT_EQ(read(in, &done, 1), 1);
  }
  device->Free(on_gpu);
  const IpcCounts c = device->counts();
  EXPECT_EQ(c.exported_regions + c.events + c.local_buffers, 0);
}

TEST(GpuCudaIpc, CarriesDeviceMemoryBetweenTwoProcesses) {
  if (const char* pipes = std::getenv(kSenderPipes)) {
    RunSender(pipes);
    return;
  }
  std::string why;
  if (CudaIpcDevice(&why) == nullptr) GTEST_SKIP() << why;
  IpcDevice& device = *CudaIpcDevice();
  int to_sender[2], from_sender[2];
  ASSERT_EQ(pipe(to_sender), 0);
  ASSERT_EQ(pipe(from_sender), 0);
  const std::string env =
      absl::StrCat(kSenderPipes, "=", to_sender[0], ",", from_sender[1]);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env.c_str()));
  envp.push_back(nullptr);
  std::string filter =
      "--gtest_filter=GpuCudaIpc.CarriesDeviceMemoryBetweenTwoProcesses";
  char self[] = "/proc/self/exe";
  char* argv[] = {self, filter.data(), nullptr};
  pid_t sender = 0;
  ASSERT_EQ(posix_spawn(&sender, self, nullptr, nullptr, argv, envp.data()), 0);

  uint32_t n = 0;
  ASSERT_EQ(read(from_sender[0], &n, sizeof(n)),
            static_cast<ssize_t>(sizeof(n)));
  std::string msg(n, '\0');
  ASSERT_EQ(read(from_sender[0], msg.data(), n), static_cast<ssize_t>(n));
  {
    petra::v1::Tensor t;
    t.set_dtype(petra::v1::DTYPE_FLOAT32);
    t.add_shape(kFloats);
    ASSERT_TRUE(t.mutable_slot()->ParseFromString(msg));
    SharedRingFetcher fetcher;
    std::vector<wire::PayloadFetcher::Field> fields = {{&t, "x", nullptr}};
    ASSERT_TRUE(fetcher.Fetch(fields, {}).ok());
    EXPECT_EQ(fields[0].device, device.current_device());
    std::vector<float> back(kFloats);
    ASSERT_TRUE(device
                    .Copy(back.data(), fields[0].bytes.get(),
                          back.size() * sizeof(float))
                    .ok());
    ASSERT_TRUE(device.Synchronize().ok());
    EXPECT_EQ(back[0], 0.0f);
    EXPECT_EQ(back[kFloats - 1], static_cast<float>(kFloats - 1));
    EXPECT_EQ(device.counts().mapped_regions, 1);
  }
  // The receiver holds nothing once its stream's fetcher and tensors are gone.
  const IpcCounts c = device.counts();
  EXPECT_EQ(c.mapped_regions + c.opened_events + c.local_buffers, 0);
  ASSERT_EQ(write(to_sender[1], "d", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(sender, &status, 0), sender);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the sender failed (its output is above)";
  for (int fd : {to_sender[0], to_sender[1], from_sender[0], from_sender[1]}) {
    close(fd);
  }
}

}  // namespace
}  // namespace petra::link

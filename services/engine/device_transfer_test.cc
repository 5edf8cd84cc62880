#include "services/engine/device_transfer.h"

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "tests/support/require_cuda.h"

namespace petra::engine {
namespace {

TEST(DeviceTransfer, OnTheCpuEveryCallLeavesTheTensorsAsTheyAre) {
  DeviceTransfer transfer(torch::kCPU, 0);
  EXPECT_FALSE(transfer.on_device());
  transfer.UseComputeStreamOnThisThread();
  torch::Tensor t = torch::randn({4, 5});
  torch::Tensor none;
  void* const bytes = t.data_ptr();
  absl::StatusOr<Transfer> in = transfer.ToDevice({&t, &none}, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(in->empty());
  EXPECT_EQ(t.data_ptr(), bytes);  // no copy: the receive stays zero-copy
  EXPECT_FALSE(none.defined());
  absl::StatusOr<Transfer> out = transfer.ToHost({&t, &none}, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->empty());
  EXPECT_EQ(t.data_ptr(), bytes);
  in->Adopt();
  out->Wait();
  EXPECT_TRUE(in->done());
}

// Runs `body(transfer, device)` for stage `stage` on GPU 0 with the stage's
// compute stream current, on a thread of its own (UseComputeStreamOnThisThread
// lasts for the thread).
template <typename F>
void OnStageThread(int stage, F body) {
  std::thread t([&] {
    const torch::Device cuda(torch::kCUDA, 0);
    DeviceTransfer transfer(cuda, stage);
    transfer.UseComputeStreamOnThisThread();
    body(transfer, cuda);
  });
  t.join();
}

// Queues about a tenth of a second of matrix products on the current stream
// and returns an event recorded after them.
c10::Event Busy(const torch::Device& device) {
  torch::Tensor a = torch::ones({4096, 4096}, device) / 4096;
  const torch::Tensor eye = torch::eye(4096, device);
  for (int i = 0; i < 64; ++i) a = torch::mm(a, eye);
  c10::Event done(device.type());
  done.record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
  return done;
}

// A received payload goes to the device on the copy stream: its copy is done
// while the compute queued before it still runs, and the compute stream
// reads it once adopted.
TEST(GpuDeviceTransfer, ACopyToTheDeviceRunsWhileTheStageComputes) {
  PETRA_REQUIRE_CUDA();
  test_support::UseExactGpuMath();
  OnStageThread(1, [](DeviceTransfer& transfer, const torch::Device& cuda) {
    const torch::Tensor host = torch::arange(1 << 20, torch::kFloat32);
    // Warm the pinned and device allocators, whose first allocations may
    // synchronize the device.
    torch::Tensor warm = host.clone();
    absl::StatusOr<Transfer> first = transfer.ToDevice({&warm}, 0);
    ASSERT_TRUE(first.ok()) << first.status();
    first->Wait();
    warm = torch::Tensor();

    const c10::Event busy = Busy(cuda);
    torch::Tensor t = host.clone();
    absl::StatusOr<Transfer> in = transfer.ToDevice({&t}, 1);
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_FALSE(in->empty());
    EXPECT_TRUE(t.is_cuda());
    in->Wait();
    EXPECT_FALSE(busy.query())
        << "the copy waited for the compute queued before it";
    in->Adopt();
    EXPECT_TRUE(torch::equal((t * 1).cpu(), host));
  });
}

// An outgoing tensor comes back to pinned host memory after the compute
// that made it, and not after the compute queued behind it.
TEST(GpuDeviceTransfer, ACopyToTheHostWaitsForItsComputeAndNotTheNext) {
  PETRA_REQUIRE_CUDA();
  test_support::UseExactGpuMath();
  OnStageThread(2, [](DeviceTransfer& transfer, const torch::Device& cuda) {
    torch::Tensor warm = torch::zeros({1 << 20}, cuda);
    absl::StatusOr<Transfer> first = transfer.ToHost({&warm}, 0);
    ASSERT_TRUE(first.ok()) << first.status();
    first->Wait();

    // Long to compute: a copy that did not wait would read it unfinished.
    torch::Tensor a = torch::full({4096, 4096}, 3.0f, cuda);
    const torch::Tensor eye = torch::eye(4096, cuda);
    for (int i = 0; i < 32; ++i) a = torch::mm(a, eye);
    torch::Tensor out = a.narrow(0, 0, 256) * 2;  // a view's product
    absl::StatusOr<Transfer> sent = transfer.ToHost({&out}, 1);
    ASSERT_TRUE(sent.ok()) << sent.status();
    a = torch::Tensor();
    const c10::Event next = Busy(cuda);
    sent->Wait();
    EXPECT_FALSE(next.query())
        << "the copy waited for the compute queued after it";
    EXPECT_TRUE(out.device().is_cpu());
    EXPECT_TRUE(out.is_pinned());
    EXPECT_TRUE(torch::equal(out, torch::full({256, 4096}, 6.0f)));
  });
}

}  // namespace
}  // namespace petra::engine

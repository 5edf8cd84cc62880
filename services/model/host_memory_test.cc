#include "services/model/host_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

namespace petra::model {
namespace {

TEST(HostMemory, ATensorCountsToTheThreadThatMadeItUntilItIsFreedAnywhere) {
  CountHostMemory();
  ASSERT_TRUE(CountingHostMemory());
  HostMemoryAccount* mine = HostMemoryAccount::Create();
  const int64_t process_before = ProcessHostMemory().bytes();
  torch::Tensor t;
  {
    ScopedHostAccount scope(mine);
    t = torch::zeros({1000}, torch::kFloat32);
  }
  EXPECT_EQ(mine->bytes(), 4000);
  EXPECT_EQ(mine->peak(), 4000);
  EXPECT_GE(ProcessHostMemory().bytes(), process_before + 4000);
  // Made outside the scope: the process's, not the account's.
  torch::Tensor other = torch::zeros({100}, torch::kFloat32);
  EXPECT_EQ(mine->bytes(), 4000);
  // Freed on another thread: given back to the account it came from.
  std::thread([t = std::move(t)]() mutable { t = torch::Tensor(); }).join();
  EXPECT_EQ(mine->bytes(), 0);
  EXPECT_EQ(mine->peak(), 4000);
  mine->ResetPeak();
  EXPECT_EQ(mine->peak(), 0);
  // Nested scopes: the inner account, then the outer again.
  HostMemoryAccount* inner = HostMemoryAccount::Create();
  {
    ScopedHostAccount outer_scope(mine);
    torch::Tensor a;
    {
      ScopedHostAccount inner_scope(inner);
      a = torch::ones({10}, torch::kFloat64);
    }
    torch::Tensor b = torch::ones({20}, torch::kFloat64);
    EXPECT_EQ(inner->bytes(), 80);
    EXPECT_EQ(mine->bytes(), 160);
    // The data is usable and aligned as libtorch's own.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data_ptr()) % 64, 0u);
    EXPECT_DOUBLE_EQ(b.sum().item<double>(), 20.0);
  }
  EXPECT_EQ(inner->bytes(), 0);
  EXPECT_EQ(mine->bytes(), 0);
  // An empty tensor allocates nothing; a resized one counts its new size.
  {
    ScopedHostAccount scope(mine);
    torch::Tensor e = torch::empty({0});
    EXPECT_EQ(mine->bytes(), 0);
    e.resize_({256});
    EXPECT_EQ(mine->bytes(), 1024);
  }
  EXPECT_EQ(mine->bytes(), 0);
}

// A stage's training peak: what happened inside the windows only, while the
// overall peak stays what it was.
TEST(HostMemory, AWindowedPeakKeepsTheWindowsApartFromTheWhole) {
  CountHostMemory();
  HostMemoryAccount* account = HostMemoryAccount::Create();
  WindowedPeak peak(account);
  ScopedHostAccount scope(account);
  torch::Tensor outside = torch::zeros({1000}, torch::kFloat32);  // 4000
  outside = torch::Tensor();
  EXPECT_EQ(peak.peak(), 4000);
  EXPECT_EQ(peak.window_peak(), 0);
  peak.Open();
  torch::Tensor kept = torch::zeros({100}, torch::kFloat32);  // 400
  {
    torch::Tensor inside = torch::zeros({500}, torch::kFloat32);  // 2000
    // Read while the window is open: its peak so far, and the whole's.
    EXPECT_EQ(peak.window_peak(), 2400);
    EXPECT_EQ(peak.peak(), 4000);
  }
  peak.Close();
  EXPECT_EQ(peak.window_peak(), 2400);
  EXPECT_EQ(peak.peak(), 4000);
  EXPECT_EQ(account->peak(), 4000);  // the account's own, given back
  // A bigger allocation outside no window moves the whole only.
  torch::Tensor big = torch::zeros({2000}, torch::kFloat32);  // 8000
  EXPECT_EQ(peak.peak(), 8400);
  EXPECT_EQ(peak.window_peak(), 2400);
  big = torch::Tensor();
  // A second window starts from what is live (400), and its peak counts
  // only where it passes the first's.
  peak.Open();
  { torch::Tensor a = torch::zeros({250}, torch::kFloat32); }  // 1000
  peak.Close();
  EXPECT_EQ(peak.window_peak(), 2400);
  peak.Open();
  { torch::Tensor a = torch::zeros({1000}, torch::kFloat32); }  // 4000
  peak.Close();
  EXPECT_EQ(peak.window_peak(), 4400);
  EXPECT_EQ(peak.peak(), 8400);
}

}  // namespace
}  // namespace petra::model

#include "services/base/usable_cores.h"

#include <gtest/gtest.h>

#include <thread>

namespace petra::base {
namespace {

TEST(UsableCores, IsAtLeastOneAndAtMostTheHosts) {
  const int cores = UsableCores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::thread::hardware_concurrency()));
}

TEST(UsableCores, ReadsACgroupCpuMaxLine) {
  EXPECT_EQ(CpuMaxLimit("200000 100000"), 2);
  EXPECT_EQ(CpuMaxLimit("150000 100000\n"), 2);  // 1.5 CPUs: 2 threads
  EXPECT_EQ(CpuMaxLimit("50000 100000"), 1);
  EXPECT_EQ(CpuMaxLimit("max 100000"), std::nullopt);
  EXPECT_EQ(CpuMaxLimit(""), std::nullopt);
  EXPECT_EQ(CpuMaxLimit("banana 100000"), std::nullopt);
  EXPECT_EQ(CpuMaxLimit("100000 0"), std::nullopt);
}

}  // namespace
}  // namespace petra::base

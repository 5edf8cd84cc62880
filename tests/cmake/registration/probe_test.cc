// Two tests as the project's binaries have them: one that runs anywhere,
// one of the `gpu` label that skips where there is no device.
#include <gtest/gtest.h>

TEST(Registration, RunsAnywhere) { SUCCEED(); }

TEST(GpuRegistration, SkipsWithoutADevice) {
  GTEST_SKIP() << "stands for a test that needs a CUDA device";
}

// Three tests as the project's binaries have them: one that runs anywhere,
// one of the `gpu` label that skips where there is no device, and one of
// the `long` label.
#include <gtest/gtest.h>

TEST(Registration, RunsAnywhere) { SUCCEED(); }

TEST(GpuRegistration, SkipsWithoutADevice) {
  GTEST_SKIP() << "stands for a test that needs a CUDA device";
}

TEST(LongRegistration, IsLabelledLong) { SUCCEED(); }

// Not a test of its own: tests/CMakeLists.txt runs each case and expects
// the crash to be reported with its stack (services/base/crash_report.h).
#include <gtest/gtest.h>

namespace {

// A real fault (a store through a null pointer), in a frame of its own.
[[gnu::noinline]] int CrashProbeFaultsHere(volatile int* where) {
  *where = 1;
  return *where + 1;
}

TEST(CrashProbe, DiesOfASegmentationFault) {
  volatile int* nowhere = nullptr;
  EXPECT_EQ(CrashProbeFaultsHere(nowhere), 2);
}

// A call through a null function pointer, which no unwinder walks out of
// (how the fleet crashed on its first GPU hosts: a libstdc++ function that
// a pip wheel's libtorch.so exports called one).
[[gnu::noinline]] int CrashProbeCallsNowhere(int (*volatile nowhere)(int)) {
  return nowhere(1) + 1;
}

TEST(CrashProbe, DiesCallingANullPointer) {
  EXPECT_EQ(CrashProbeCallsNowhere(nullptr), 2);
}

}  // namespace

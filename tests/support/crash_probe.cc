// Not a test of its own: tests/CMakeLists.txt runs it and expects the
// crash to be reported with its stack (tests/support/test_main.cc).
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

}  // namespace

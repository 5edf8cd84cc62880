// Suites as a BY_SUITE binary has them (cmake/PetraTests.cmake): one that
// passes whole, one where a test skips, one where a test fails beside a
// skip when PETRA_PROBE_FAIL is set, and one registered test by test.
#include <gtest/gtest.h>

#include <cstdlib>

TEST(Together, First) { SUCCEED(); }
TEST(Together, Second) { SUCCEED(); }

TEST(PartlySkipped, Runs) { SUCCEED(); }
TEST(PartlySkipped, Skips) { GTEST_SKIP() << "stands for a missing tool"; }

TEST(FailsBesideASkip, Skips) { GTEST_SKIP() << "stands for a missing tool"; }
TEST(FailsBesideASkip, FailsWhenAsked) {
  EXPECT_EQ(std::getenv("PETRA_PROBE_FAIL"), nullptr);
}

TEST(OneByOne, First) { SUCCEED(); }
TEST(OneByOne, Second) { SUCCEED(); }

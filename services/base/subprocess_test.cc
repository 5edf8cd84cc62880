// RunProgram: input in, output back, and every way a program can fail said
// clearly, without a deadlock on large input or output and without a
// SIGPIPE when the program stops reading.
#include "services/base/subprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace petra::base {
namespace {

using ::testing::HasSubstr;

TEST(RunProgram, GivesItsInputAndReturnsItsOutput) {
  absl::StatusOr<std::string> out = RunProgram({"cat"}, "one\ntwo\n", "");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "one\ntwo\n");
  out = RunProgram({"echo", "no input"}, "", "");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "no input\n");
}

TEST(RunProgram, MovesMoreThanAPipeHoldsBothWays) {
  // 8 MiB in and out: a pipe holds 64 KiB, so writing all before reading
  // would deadlock.
  std::string big(8 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 997) big[i] = '\n';
  absl::StatusOr<std::string> out = RunProgram({"cat"}, big, "");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, big);
}

TEST(RunProgram, AProgramThatStopsReadingIsNoSignalToUs) {
  absl::StatusOr<std::string> out =
      RunProgram({"head", "-c", "3"}, std::string(4 << 20, 'y'), "");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "yyy");
}

TEST(RunProgram, RunsInTheFolderItIsGiven) {
  absl::StatusOr<std::string> out = RunProgram({"pwd"}, "", "", "/usr");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "/usr\n");
}

TEST(RunProgram, FailuresSayWhat) {
  absl::StatusOr<std::string> missing =
      RunProgram({"petra-no-such-program"}, "", "apt-get install it");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(),
              HasSubstr("petra-no-such-program is not installed (apt-get "
                        "install it)"));
  absl::StatusOr<std::string> failed = RunProgram(
      {"sh", "-c", "echo partial; echo it broke >&2; exit 3"}, "", "");
  EXPECT_TRUE(absl::IsInternal(failed.status())) << failed.status();
  EXPECT_THAT(failed.status().message(),
              HasSubstr("sh exited with status 3: it broke"));
  absl::StatusOr<std::string> killed =
      RunProgram({"sh", "-c", "kill -9 $$"}, "", "");
  EXPECT_THAT(killed.status().message(), HasSubstr("killed by signal 9"));
}

}  // namespace
}  // namespace petra::base

#include "services/base/paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace petra::base {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh directory tree: root/ (with data/ and a file) beside outside/.
class ConfinedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/petra-paths-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    top_ = pattern;
    root_ = (top_ / "root").string();
    fs::create_directories(top_ / "root" / "data");
    fs::create_directories(top_ / "outside");
    std::ofstream(top_ / "outside" / "secret") << "secret";
  }
  void TearDown() override { petra::base::RemoveTree(top_).IgnoreError(); }

  absl::Status Refusal(const std::string& relative,
                       AbsolutePath absolute = AbsolutePath::kRefuse) {
    return ConfinedPath(root_, relative, "the_field", absolute).status();
  }

  fs::path top_;
  std::string root_;
};

TEST_F(ConfinedPathTest, AcceptsPathsInsideTheRoot) {
  absl::StatusOr<fs::path> p = ConfinedPath(root_, "data", "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, fs::weakly_canonical(top_ / "root" / "data"));
  // Need not exist yet (a checkpoint about to be written).
  p = ConfinedPath(root_, "job-7/epoch-1/stage-0.pt", "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, fs::weakly_canonical(top_ / "root") / "job-7" / "epoch-1" /
                    "stage-0.pt");
  EXPECT_TRUE(ConfinedPath(root_, "./data/./x", "f").ok());
  EXPECT_TRUE(ConfinedPath(root_, ".", "f").ok());
  // A symbolic link that stays inside is fine.
  fs::create_directory_symlink(top_ / "root" / "data", top_ / "root" / "alias");
  p = ConfinedPath(root_, "alias/file", "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, fs::weakly_canonical(top_ / "root" / "data") / "file");
}

TEST_F(ConfinedPathTest, RefusesEmptyAbsoluteDotDotAndNul) {
  for (const std::string& bad :
       {std::string(""), std::string("/etc/passwd"), std::string(".."),
        std::string("../outside/secret"), std::string("data/../../outside"),
        std::string("data/.."), std::string("a\0b", 3)}) {
    absl::Status s = Refusal(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("the_field \"")) << bad;
  }
  EXPECT_THAT(std::string(Refusal("/etc").message()), HasSubstr("absolute"));
  EXPECT_THAT(std::string(Refusal("a/../b").message()),
              HasSubstr("may not contain \"..\""));
  EXPECT_THAT(std::string(Refusal(std::string("a\0b", 3)).message()),
              HasSubstr("NUL"));
  // The server's own directories are not named to the client.
  EXPECT_THAT(std::string(Refusal("/etc").message()), Not(HasSubstr(root_)));
}

TEST_F(ConfinedPathTest, RefusesASymbolicLinkPointingOutside) {
  fs::create_directory_symlink(top_ / "outside", top_ / "root" / "escape");
  absl::Status s = Refusal("escape/secret");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the_field \"escape/secret\": resolves outside"));
  // The link itself, and a file below it that does not exist yet.
  EXPECT_FALSE(Refusal("escape").ok());
  EXPECT_FALSE(Refusal("escape/new/file").ok());
  // A file link too.
  fs::create_symlink(top_ / "outside" / "secret", top_ / "root" / "data" / "f");
  EXPECT_FALSE(Refusal("data/f").ok());
}

TEST_F(ConfinedPathTest, AbsolutePathsInsideTheRootWhenAllowed) {
  const std::string inside = (top_ / "root" / "data").string();
  EXPECT_FALSE(Refusal(inside).ok());
  absl::StatusOr<fs::path> p =
      ConfinedPath(root_, inside, "f", AbsolutePath::kAllowInsideRoot);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, fs::weakly_canonical(inside));
  absl::Status s =
      Refusal((top_ / "outside").string(), AbsolutePath::kAllowInsideRoot);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("is outside the server's root directory"));
  // Named by the flag that set the root, where the caller knows it.
  s = ConfinedPath(root_, (top_ / "outside").string(), "f",
                   AbsolutePath::kAllowInsideRoot, "--data-root")
          .status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("is outside the server's --data-root"));
  // A sibling whose name starts with the root's is still outside.
  fs::create_directories(top_ / "root2");
  EXPECT_FALSE(
      Refusal((top_ / "root2").string(), AbsolutePath::kAllowInsideRoot).ok());
  EXPECT_FALSE(Refusal((top_ / "root" / ".." / "outside").string(),
                       AbsolutePath::kAllowInsideRoot)
                   .ok());
}

TEST_F(ConfinedPathTest, AnUnusableRootIsTheServersProblem) {
  EXPECT_EQ(ConfinedPath("", "data", "f").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// RemoveTree empties a tree depth first, removes a link without following
// it, and takes a missing path as done.
TEST_F(ConfinedPathTest, RemoveTreeRemovesTheTreeAndNotWhatItsLinksReach) {
  const fs::path tree = top_ / "root";
  fs::create_directories(tree / "data" / "deep" / "deeper");
  std::ofstream(tree / "data" / "deep" / "file") << "x";
  fs::create_directory_symlink(top_ / "outside", tree / "data" / "link");
  ASSERT_TRUE(RemoveTree(tree).ok());
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(top_ / "outside" / "secret"));
  EXPECT_TRUE(RemoveTree(tree).ok());
  std::ofstream(top_ / "file") << "x";
  EXPECT_TRUE(RemoveTree(top_ / "file").ok());
  EXPECT_FALSE(fs::exists(top_ / "file"));
}

TEST(RemoveTree, NamesWhatItCouldNotRemove) {
  // Not even root may unlink a file of /proc.
  absl::Status status = RemoveTree("/proc/self/comm");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("/proc/self/comm"));
}

}  // namespace
}  // namespace petra::base

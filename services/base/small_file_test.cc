#include "services/base/small_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "services/base/paths.h"

namespace petra::base {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& dir, const std::string& name,
                  const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ReadSmallFile, ReadsWholeFilesUpToTheLimitAndNoMore) {
  char tmpl[] = "/tmp/petra-small-file-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  // Larger than one read piece (64 KiB), with every byte value.
  std::string big(200000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  const std::string path = Write(dir, "big", big);
  absl::StatusOr<std::string> r = ReadSmallFile(path, 200000, "a test");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, big);
  r = ReadSmallFile(path, 199999, "a test");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("larger than 199999 bytes, too large for a test"));
  r = ReadSmallFile(Write(dir, "empty", ""), 10, "a test");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "");
  r = ReadSmallFile(dir + "/missing", 10, "a test");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/missing"));
  petra::base::RemoveTree(dir).IgnoreError();
}

}  // namespace
}  // namespace petra::base

#include "services/base/constant_time.h"

#include <gtest/gtest.h>

namespace petra::base {
namespace {

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3creT"));
  EXPECT_FALSE(ConstantTimeEquals("a", ""));
  EXPECT_FALSE(ConstantTimeEquals("ab", "a"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), "a"));
}

}  // namespace
}  // namespace petra::base

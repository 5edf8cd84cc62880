#include "services/base/utf8.h"

#include <gtest/gtest.h>

namespace petra::base {
namespace {

TEST(Utf8, HiddenCodePointsAreFoundWhereverTheyAre) {
  struct Case {
    const char* text;
    uint32_t first;
  };
  for (const Case& c : {
           Case{"a\nb", 0x0A},
           Case{"a\x7f", 0x7F},
           Case{"\xc2\x85", 0x85},                  // NEL (C1)
           Case{"gpu\xe2\x80\xaetxt.exe", 0x202E},  // right-to-left override
           Case{"a\xe2\x80\xa8"
                "b",
                0x2028},                   // line separator
           Case{"a\xe2\x80\xa9", 0x2029},  // paragraph separator
           Case{"a\xe2\x80\x8b"
                "b",
                0x200B},                               // zero-width space
           Case{"\xe2\x81\xa6x\xe2\x81\xa9", 0x2066},  // isolates
           Case{"\xef\xbb\xbfname", 0xFEFF},           // byte-order mark
           Case{"\xd8\x9c", 0x061C},                   // Arabic letter mark
           Case{"soft\xc2\xad"
                "hyphen",
                0x00AD},
       }) {
    const std::optional<uint32_t> found = FirstHiddenCodePoint(c.text);
    ASSERT_TRUE(found.has_value()) << c.text;
    EXPECT_EQ(*found, c.first) << CodePointName(*found);
  }
}

TEST(Utf8, ReadableNamesHoldNoHiddenCodePoints) {
  for (const char* text :
       {"", "resnet run 3", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
        "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",  // Hebrew: right-to-left letters
        "emoji \xf0\x9f\x9a\x80",
        "a\xe2\x80\x94"
        "b"}) {  // em dash
    EXPECT_FALSE(FirstHiddenCodePoint(text).has_value()) << text;
  }
  // Bytes that are not UTF-8 are IsUtf8's to refuse.
  EXPECT_FALSE(FirstHiddenCodePoint("\xff\xfe").has_value());
  EXPECT_EQ(CodePointName(0x202E), "U+202E");
  EXPECT_EQ(CodePointName(0x1F680), "U+1F680");
}

}  // namespace
}  // namespace petra::base

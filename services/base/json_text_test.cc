#include "services/base/json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace petra::base {
namespace {

TEST(JsonString, QuotesAndEscapes) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("run \"A\""), "\"run \\\"A\\\"\"");
  EXPECT_EQ(JsonString("C:\\runs\\a"), "\"C:\\\\runs\\\\a\"");
  EXPECT_EQ(JsonString("a\nb\tc\r"), "\"a\\nb\\tc\\r\"");
  EXPECT_EQ(JsonString(std::string("\x01\x1f\x7f", 3)),
            "\"\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(JsonString(std::string("a\0b", 3)), "\"a\\u0000b\"");
}

TEST(JsonString, KeepsUtf8AndReplacesInvalidBytes) {
  // é (2 bytes), € (3), 𝄞 (4) stay as they are.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E";
  EXPECT_EQ(JsonString(text), "\"" + text + "\"");
  const std::string fffd = "\xEF\xBF\xBD";
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate and a code point above U+10FFFF.
  EXPECT_EQ(JsonString("a\x80z"), "\"a" + fffd + "z\"");
  EXPECT_EQ(JsonString("a\xE2\x82"), "\"a" + fffd + fffd + "\"");
  EXPECT_EQ(JsonString("\xC0\xAF"), "\"" + fffd + fffd + "\"");
  EXPECT_EQ(JsonString("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");
  EXPECT_EQ(JsonString("\xF4\x90\x80\x80"),
            "\"" + fffd + fffd + fffd + fffd + "\"");
}

}  // namespace
}  // namespace petra::base

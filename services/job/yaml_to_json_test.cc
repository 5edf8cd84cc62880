#include "services/job/yaml_to_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::job {
namespace {

using ::testing::HasSubstr;

std::string Json(const std::string& yaml) {
  absl::StatusOr<std::string> json = YamlToJson(yaml);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.value_or("");
}

TEST(YamlToJson, TypesPlainScalarsByTheCoreSchema) {
  EXPECT_EQ(Json("a: 3\nb: -2.5\nc: true\nd: False\ne: ~\nf: text\n"),
            R"({"a":3,"b":-2.5,"c":true,"d":false,"e":null,"f":"text"})");
  EXPECT_EQ(Json("a: 0x1F\nb: 0o17\nc: +7\nd: 007\ne: .5\nf: 1e3\n"),
            R"({"a":31,"b":15,"c":7,"d":7,"e":0.5,"f":1e3})");
  EXPECT_EQ(Json("a: .inf\nb: -.Inf\nc: .nan\n"),
            R"({"a":"Infinity","b":"-Infinity","c":"NaN"})");
  // Every digit of a uint64 survives (a seed).
  EXPECT_EQ(Json("seed: 18446744073709551615"),
            R"({"seed":18446744073709551615})");
}

TEST(YamlToJson, QuotedScalarsStayStrings) {
  EXPECT_EQ(Json("a: \"3\"\nb: 'true'\nc: \"say \\\"hi\\\"\"\n"),
            R"({"a":"3","b":"true","c":"say \"hi\""})");
}

TEST(YamlToJson, NestsMappingsAndSequences) {
  EXPECT_EQ(Json("model:\n  architecture: revnet18\n  width: 0.25\n"
                 "devices: [cpu, cuda:1]\nsplits:\n  - 0\n  - 4\n"),
            R"({"model":{"architecture":"revnet18","width":0.25},)"
            R"("devices":["cpu","cuda:1"],"splits":[0,4]})");
  EXPECT_EQ(Json(""), "{}");
  EXPECT_EQ(Json("# only a comment\n"), "{}");
}

TEST(YamlToJson, ErrorsSayWhere) {
  for (const auto& [yaml, expected] :
       std::vector<std::pair<std::string, std::string>>{
           {"a: [1, 2\n", "line "},
           {"- 1\n- 2\n", "a job spec is a mapping of fields"},
           {"a: 1\n---\nb: 2\n", "one document"},
           {"? [1, 2]\n: x\n", "a key must be a plain name"},
           {"a: " + std::string(200, '[') + std::string(200, ']'),
            "nested deeper than 64"}}) {
    absl::StatusOr<std::string> json = YamlToJson(yaml);
    ASSERT_FALSE(json.ok()) << yaml;
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(json.status().message()), HasSubstr(expected))
        << yaml;
    EXPECT_THAT(std::string(json.status().message()), HasSubstr("YAML"));
  }
}

}  // namespace
}  // namespace petra::job

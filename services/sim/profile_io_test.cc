#include "services/sim/profile_io.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace petra::sim {
namespace {

using ::testing::HasSubstr;

constexpr char kCamel[] = R"({
  "architecture": "revnet18", "variant": "cifar", "width": 1,
  "microBatchSize": 64, "device": "cpu", "threadsPerStage": 1,
  "source": "measured",
  "stages": [
    {"index": 0, "firstBlock": 0, "endBlock": 1, "parameters": "1000",
     "inputBytes": "786432", "outputBytes": "2097152",
     "forwardSeconds": 0.01, "backwardSeconds": 0.03,
     "backwardStoredSeconds": 0.02},
    {"index": 1, "firstBlock": 1, "endBlock": 3, "reversible": true,
     "parameters": 5000, "inputBytes": 2097152, "outputBytes": 40,
     "forwardSeconds": 0.02, "backwardSeconds": 0.06,
     "activationBytes": 123456}
  ]
})";

constexpr char kSnake[] = R"({
  "micro_batch_size": 8,
  "stages": [{"index": 0, "first_block": 0, "end_block": 2,
              "forward_seconds": 1.5, "backward_seconds": 2,
              "input_bytes": 12, "output_bytes": 34,
              "backward_stored_seconds": 1, "forward_stored_seconds": 1.75}]
})";

TEST(ProfileIo, ParsesLowerCamelCaseAndProtoNames) {
  absl::StatusOr<petra::v1::Profile> camel = ParseProfileJson(kCamel);
  ASSERT_TRUE(camel.ok()) << camel.status();
  absl::StatusOr<std::vector<StageCost>> costs = StageCostsFromProfile(*camel);
  ASSERT_TRUE(costs.ok()) << costs.status();
  ASSERT_EQ(costs->size(), 2u);
  EXPECT_EQ((*costs)[0].input_bytes, 786432);
  EXPECT_EQ((*costs)[0].output_bytes, 2097152);
  EXPECT_EQ((*costs)[0].parameters, 1000);
  EXPECT_DOUBLE_EQ((*costs)[0].backward_stored_seconds, 0.02);
  EXPECT_FALSE((*costs)[0].reversible);
  EXPECT_TRUE((*costs)[1].reversible);
  EXPECT_DOUBLE_EQ((*costs)[1].forward_seconds, 0.02);
  EXPECT_DOUBLE_EQ((*costs)[1].backward_stored_seconds, 0);
  EXPECT_EQ((*costs)[0].activation_bytes, 0);
  EXPECT_EQ((*costs)[1].activation_bytes, 123456);

  absl::StatusOr<petra::v1::Profile> snake = ParseProfileJson(kSnake);
  ASSERT_TRUE(snake.ok()) << snake.status();
  costs = StageCostsFromProfile(*snake);
  ASSERT_TRUE(costs.ok()) << costs.status();
  EXPECT_EQ((*costs)[0].input_bytes, 12);
  EXPECT_EQ((*costs)[0].output_bytes, 34);
  EXPECT_DOUBLE_EQ((*costs)[0].backward_seconds, 2);
  EXPECT_DOUBLE_EQ((*costs)[0].forward_stored_seconds, 1.75);
}

TEST(ProfileIo, PrintedJsonReadsBack) {
  absl::StatusOr<petra::v1::Profile> p = ParseProfileJson(kCamel);
  ASSERT_TRUE(p.ok());
  const std::string json = ProfileToJson(*p);
  EXPECT_THAT(json, HasSubstr("\"backward_stored_seconds\""));
  absl::StatusOr<petra::v1::Profile> back = ParseProfileJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), p->SerializeAsString());
}

TEST(ProfileIo, RefusesBadJson) {
  EXPECT_THAT(ParseProfileJson("{").status().message(),
              HasSubstr("profile JSON"));
  EXPECT_FALSE(ParseProfileJson(R"({"stages": [{"forwardSecond": 1}]})").ok());
  EXPECT_FALSE(ParseProfileJson(R"({"microBatchSize": -1})").ok());
}

std::string Invalid(const std::string& json) {
  absl::StatusOr<petra::v1::Profile> p = ParseProfileJson(json);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return "";
  absl::Status s = ValidateProfile(*p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StageCostsFromProfile(*p).status(), s);
  return std::string(s.message());
}

TEST(ProfileIo, ValidationNamesTheField) {
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4})"), HasSubstr("stages: none"));
  EXPECT_THAT(Invalid(R"({"stages": [{"index": 0}]})"),
              HasSubstr("micro_batch_size"));
  EXPECT_THAT(
      Invalid(
          R"({"microBatchSize": 4, "stages": [{"index": 0}, {"index": 2}]})"),
      HasSubstr("stages[1].index = 2"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4,
                          "stages": [{"forwardSeconds": -0.5}]})"),
              HasSubstr("stages[0].forward_seconds = -0.5"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4,
                          "stages": [{"backwardSeconds": "NaN"}]})"),
              HasSubstr("stages[0].backward_seconds = nan"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4,
                          "stages": [{"backwardStoredSeconds": "Infinity"}]})"),
              HasSubstr("stages[0].backward_stored_seconds"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4,
                          "stages": [{"forwardStoredSeconds": -1}]})"),
              HasSubstr("stages[0].forward_stored_seconds = -1"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4,
                          "stages": [{"firstBlock": 3, "endBlock": 3}]})"),
              HasSubstr("stages[0].end_block = 3"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4, "stages": [
                 {"index": 0, "firstBlock": 0, "endBlock": 2},
                 {"index": 1, "firstBlock": 3, "endBlock": 4}]})"),
              HasSubstr("stages[1].first_block = 3"));
  EXPECT_THAT(Invalid(R"({"microBatchSize": 4,
                          "stages": [{"inputBytes": "18446744073709551615"}]})"),
              HasSubstr("stages[0].input_bytes"));
}

TEST(ProfileIo, ReadFileNamesThePath) {
  const std::string dir = ::testing::TempDir();
  const std::string missing = dir + "/no-such-profile.json";
  absl::StatusOr<petra::v1::Profile> p = ReadProfileFile(missing);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr(missing));

  const std::string bad = dir + "/bad-profile.json";
  std::ofstream(bad) << "{\"stages\": 3}";
  p = ReadProfileFile(bad);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr(bad));

  const std::string good = dir + "/good-profile.json";
  std::ofstream(good) << kSnake;
  p = ReadProfileFile(good);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->micro_batch_size(), 8u);
  std::remove(bad.c_str());
  std::remove(good.c_str());

  p = ReadProfileFile(dir);  // a directory
  EXPECT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr(dir));
}

}  // namespace
}  // namespace petra::sim

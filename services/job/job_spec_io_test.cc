#include "services/job/job_spec_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace petra::job {
namespace {

using ::testing::HasSubstr;

class TempFile {
 public:
  TempFile(const std::string& suffix, const std::string& contents) {
    char name[] = "/tmp/petra_spec_XXXXXX";
    int fd = mkstemp(name);
    close(fd);
    std::remove(name);
    path_ = std::string(name) + suffix;
    std::ofstream(path_) << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(JobSpecIo, ParsesJsonWithEnumNamesAndOptionalZeros) {
  absl::StatusOr<petra::v1::JobSpec> s = ParseJobSpec(R"({
    "model": {"architecture": "ARCHITECTURE_REVNET18", "width": 0.25},
    "dataset": {"kind": "DATASET_KIND_FASHION_MNIST"},
    "training": {"accumulation_steps": 0},
    "optimizer": {"momentum": 0},
    "devices": ["cpu"]
  })",
                                                      SpecFormat::kJson);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model().architecture(), petra::v1::ARCHITECTURE_REVNET18);
  EXPECT_EQ(s->model().width(), 0.25);
  // An explicit 0 is kept as set (and later refused by validation).
  EXPECT_TRUE(s->training().has_accumulation_steps());
  EXPECT_TRUE(s->optimizer().has_momentum());
  EXPECT_FALSE(s->training().has_epochs());
}

// The short names the flags take work in JSON too, in any case, in nested
// and repeated fields; full names and everything else are as they were.
TEST(JobSpecIo, JsonTakesShortEnumNamesAsTheFlagsDo) {
  absl::StatusOr<petra::v1::JobSpec> s = ParseJobSpec(R"({
    "model": {"architecture": "revvit", "variant": "MNIST"},
    "dataset": {"kind": "image_folder", "path": "revvit",
                "imageFolder": {"corruptImages": "skip"}},
    "training": {"mode": "forward-gradient",
                 "forward_gradient": {"guess": "random"}},
    "optimizer": {"kind": "KIND_SGD"},
    "seed": "18446744073709551615"
  })",
                                                      SpecFormat::kJson);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model().architecture(), petra::v1::ARCHITECTURE_REVVIT);
  EXPECT_EQ(s->model().variant(), petra::v1::VARIANT_MNIST);
  EXPECT_EQ(s->dataset().kind(), petra::v1::DATASET_KIND_IMAGE_FOLDER);
  EXPECT_EQ(s->dataset().path(), "revvit");  // a string, not an enum
  EXPECT_EQ(s->dataset().image_folder().corrupt_images(),
            petra::v1::ImageFolderSpec::CORRUPT_IMAGE_POLICY_SKIP);
  EXPECT_EQ(s->training().mode(), petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
  EXPECT_EQ(s->training().forward_gradient().guess(),
            petra::v1::ForwardGradientSpec::GUESS_RANDOM);
  EXPECT_EQ(s->seed(), 18446744073709551615u);  // numbers untouched
  // Nesting deeper than the walk goes is left to the parser, not a crash.
  s = ParseJobSpec(std::string(100000, '[') + std::string(100000, ']'),
                   SpecFormat::kJson);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  s = ParseJobSpec(
      "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
      SpecFormat::kJson);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  // An unknown short name is still refused by the parser.
  s = ParseJobSpec(R"({"dataset": {"kind": "imagefolder"}})",
                   SpecFormat::kJson);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobSpecIo, JsonErrorsAreInvalidArgument) {
  for (const char* bad :
       {"{", R"({"modle": {}})", R"({"model": {"architecture": "REVNET99"}})",
        R"({"training": {"epochs": -1}})"}) {
    absl::StatusOr<petra::v1::JobSpec> s = ParseJobSpec(bad, SpecFormat::kJson);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("job spec JSON"));
  }
}

// What a new user did: a spec with two typos reported only the first, and
// they had to submit again to find the second.
TEST(JobSpecIo, JsonReportsEveryUnknownNameAtOnce) {
  absl::StatusOr<petra::v1::JobSpec> s = ParseJobSpec(R"({
    "modle": {"architecture": "revnet18"},
    "training": {"epoch": 3, "mode": "petraa"},
    "devices": ["cpu"],
    "partition": {"splits": {"splitAt": [0, 2], "split_att": [1]}}
  })",
                                                      SpecFormat::kJson);
  ASSERT_FALSE(s.ok());
  const std::string message(s.status().message());
  EXPECT_THAT(message,
              HasSubstr("modle: unknown field (did you mean \"model\"?)"));
  EXPECT_THAT(message, HasSubstr("training.epoch: unknown field (did you mean "
                                 "\"epochs\"?)"));
  EXPECT_THAT(message, HasSubstr("training.mode: unknown value \"petraa\""));
  EXPECT_THAT(message, HasSubstr("partition.splits.split_att: unknown field"));
  EXPECT_LT(message.find("modle"), message.find("training.epoch"));
  // A name far from every field gets no guess.
  s = ParseJobSpec(R"({"zzzzzzzz": 1})", SpecFormat::kJson);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("zzzzzzzz: unknown field"));
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::Not(HasSubstr("did you mean")));
  // Unknown names inside a list of messages carry the index.
  s = ParseJobSpec(R"({"devices": ["cpu"], "model": {"widht": 1}})",
                   SpecFormat::kJson);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(
      std::string(s.status().message()),
      HasSubstr("model.widht: unknown field (did you mean \"width\"?)"));
}

// What a new user did: `petra submit --from spec.yaml` was refused as bad
// JSON while petra.Client read the same file.
TEST(JobSpecIo, ReadsYamlFiles) {
  TempFile yaml(".yaml", R"(# a RevNet on Fashion-MNIST
name: from-yaml
model:
  architecture: revnet18
  width: 0.25
dataset: {kind: fashion_mnist, train_limit: 512}
training:
  epochs: 2
  mode: PETRA
  overlap_rebuild: true
optimizer: {learning_rate: 0.05}
devices: [cpu]
seed: 18446744073709551615
)");
  absl::StatusOr<petra::v1::JobSpec> s = ReadJobSpecFile(yaml.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name(), "from-yaml");
  EXPECT_EQ(s->model().architecture(), petra::v1::ARCHITECTURE_REVNET18);
  EXPECT_EQ(s->model().width(), 0.25);
  EXPECT_EQ(s->dataset().kind(), petra::v1::DATASET_KIND_FASHION_MNIST);
  EXPECT_EQ(s->dataset().train_limit(), 512u);
  EXPECT_EQ(s->training().epochs(), 2u);
  EXPECT_EQ(s->training().mode(), petra::v1::TRAINING_MODE_PETRA);
  EXPECT_TRUE(s->training().overlap_rebuild());
  EXPECT_EQ(s->optimizer().learning_rate(), 0.05);
  EXPECT_EQ(s->seed(), 18446744073709551615u);
  TempFile yml(".yml", "seed: 4\n");
  absl::StatusOr<petra::v1::JobSpec> t = ReadJobSpecFile(yml.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->seed(), 4u);
}

TEST(JobSpecIo, YamlErrorsNameTheFileAndSayWhere) {
  TempFile typos(".yaml", "modle: {}\ntraining: {epoch: 3}\n");
  absl::StatusOr<petra::v1::JobSpec> s = ReadJobSpecFile(typos.path());
  ASSERT_FALSE(s.ok());
  std::string message(s.status().message());
  EXPECT_THAT(message, HasSubstr(typos.path()));
  EXPECT_THAT(message, HasSubstr("job spec YAML: modle: unknown field"));
  EXPECT_THAT(message, HasSubstr("training.epoch: unknown field"));
  TempFile broken(".yaml", "model:\n  width: [1\n");
  s = ReadJobSpecFile(broken.path());
  ASSERT_FALSE(s.ok());
  message = std::string(s.status().message());
  EXPECT_THAT(message, HasSubstr("job spec YAML line "));
  TempFile wrong_type(".yaml", "training: {epochs: many}\n");
  s = ReadJobSpecFile(wrong_type.path());
  ASSERT_FALSE(s.ok());
  message = std::string(s.status().message());
  EXPECT_THAT(message, HasSubstr("job spec YAML"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("JSON")));
}

TEST(JobSpecIo, TextProtoErrorsGiveLineAndColumn) {
  absl::StatusOr<petra::v1::JobSpec> s = ParseJobSpec(
      "model { architecture: ARCHITECTURE_REVNET18 }\nseed: banana\n",
      SpecFormat::kTextProto);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("line 2"));
}

TEST(JobSpecIo, ReadsFilesByExtension) {
  TempFile json(".json", R"({"seed": "7"})");
  absl::StatusOr<petra::v1::JobSpec> a = ReadJobSpecFile(json.path());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->seed(), 7u);
  TempFile text(".txtpb", "seed: 9");
  absl::StatusOr<petra::v1::JobSpec> b = ReadJobSpecFile(text.path());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->seed(), 9u);
}

TEST(JobSpecIo, MissingFileIsNotFoundNamingThePath) {
  absl::StatusOr<petra::v1::JobSpec> s =
      ReadJobSpecFile("/nonexistent/spec.json");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("/nonexistent/spec.json"));
}

TEST(JobSpecIo, BadFileNamesThePath) {
  TempFile json(".json", "not json");
  absl::StatusOr<petra::v1::JobSpec> s = ReadJobSpecFile(json.path());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(json.path()));
}

TEST(JobSpecIo, OversizedFileIsRefused) {
  TempFile big(".json", std::string(2 << 20, ' '));
  absl::StatusOr<petra::v1::JobSpec> s = ReadJobSpecFile(big.path());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("too large"));
}

TEST(JobSpecIo, JsonRoundTrip) {
  petra::v1::JobSpec spec;
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_RESNET50);
  spec.mutable_training()->set_epochs(3);
  spec.add_devices("cuda:0");
  std::string json = JobSpecToJson(spec);
  EXPECT_THAT(json, HasSubstr("\"architecture\": \"ARCHITECTURE_RESNET50\""));
  absl::StatusOr<petra::v1::JobSpec> back =
      ParseJobSpec(json, SpecFormat::kJson);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), spec.SerializeAsString());
}

}  // namespace
}  // namespace petra::job

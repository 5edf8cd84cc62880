// State files read from disk tensor by tensor, described without their
// bytes, checked, and merged into an export record by record.
#include "services/engine/state_file.h"

#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "services/base/paths.h"
#include "services/engine/state_file_reader.h"

namespace petra::engine {
namespace {

using ::testing::HasSubstr;

class StateFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("petra-state-file-", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { base::RemoveTree(dir_).IgnoreError(); }

  std::filesystem::path Write(const std::string& name,
                              const std::string& bytes) {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // A stage's checkpoint: its blocks, its optimizer state and a counter.
  static std::string Stage(int first_block, float seed) {
    torch::manual_seed(static_cast<uint64_t>(seed));
    absl::StatusOr<std::string> bytes = EncodeStateFile({
        {absl::StrCat("blocks.", first_block, ".conv.weight"),
         torch::randn({4, 3, 3, 3})},
        {absl::StrCat("blocks.", first_block + 1, ".bn.running_mean"),
         torch::randn({4}, torch::kFloat64)},
        {absl::StrCat("optimizer.", first_block), torch::randn({7})},
        {"meta.epoch", torch::tensor(int64_t{3})},
    });
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return *bytes;
  }
  std::filesystem::path dir_;
};

TEST_F(StateFile, AFileOnDiskReadsAsItsBytesDo) {
  const std::string bytes = Stage(0, 1);
  absl::StatusOr<NamedTensors> from_bytes = DecodeStateFile(bytes);
  absl::StatusOr<NamedTensors> from_file =
      ReadStateFile(Write("stage-0.pt", bytes));
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  ASSERT_EQ(from_file->size(), 4u);
  for (const auto& [name, t] : *from_bytes) {
    ASSERT_EQ(from_file->count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(from_file->at(name), t)) << name;
  }
  EXPECT_EQ(from_file->at("meta.epoch").item<int64_t>(), 3);
}

TEST_F(StateFile, DescribedTensorsHaveTheirShapesAndNoBytes) {
  absl::StatusOr<std::unique_ptr<StateFileReader>> reader =
      StateFileReader::Open(Write("stage-0.pt", Stage(2, 1)));
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto described = (*reader)->Read(StateFileReader::Tensors::kDescribed);
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 4u);
  for (const auto& [name, t] : *described) {
    EXPECT_TRUE(StateFileReader::IsDescribed(t.storage())) << name;
    EXPECT_EQ(t.storage().data(), nullptr) << name;
  }
  const NamedTensors loaded = *DecodeStateFile(Stage(2, 1));
  const at::Tensor& weight = (*described)[0].second;
  EXPECT_EQ((*described)[0].first, "blocks.2.conv.weight");
  EXPECT_EQ(weight.sizes(), loaded.at("blocks.2.conv.weight").sizes());
  EXPECT_EQ((*described)[1].second.scalar_type(), torch::kFloat64);
  // Its bytes, when asked, are the tensor's.
  auto record = StateFileReader::Record(weight.storage());
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(record->second, 4u * 3 * 3 * 3 * sizeof(float));
  EXPECT_TRUE(torch::equal(torch::from_blob(record->first.get(), {4, 3, 3, 3}),
                           loaded.at("blocks.2.conv.weight")));
  // A tensor that was loaded is not a described one.
  EXPECT_FALSE(StateFileReader::IsDescribed(loaded.at("meta.epoch").storage()));
  EXPECT_FALSE(StateFileReader::Record(loaded.at("meta.epoch").storage()).ok());
}

TEST_F(StateFile, ADamagedOrMissingFileIsRefusedWithWhy) {
  const std::string bytes = Stage(0, 1);
  EXPECT_TRUE(CheckStateFile(Write("whole.pt", bytes)).ok());
  const absl::Status missing = CheckStateFile(dir_ / "none.pt");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("none.pt is missing"));
  for (const std::string& broken :
       {std::string("not a zip at all"), bytes.substr(0, bytes.size() / 2),
        bytes.substr(0, bytes.size() - 30)}) {
    const std::filesystem::path p = Write("broken.pt", broken);
    const absl::Status s = CheckStateFile(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("state file")) << s;
    EXPECT_FALSE(ReadStateFile(p).ok());
  }
  // A file whose pickle names a record that is not there: its data.pkl
  // alone.
  caffe2::serialize::PyTorchStreamReader whole(Write("whole.pt", bytes));
  auto [pickle, pickle_size] = whole.getRecord("data.pkl");
  std::string pickle_only;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* d, size_t n) {
      pickle_only.append(static_cast<const char*>(d), n);
      return n;
    });
    writer.writeRecord("data.pkl", pickle.get(), pickle_size);
    writer.writeEndOfFile();
  }
  const absl::Status lacking = CheckStateFile(Write("lacking.pt", pickle_only));
  EXPECT_EQ(lacking.code(), absl::StatusCode::kInvalidArgument) << lacking;
  EXPECT_THAT(lacking.message(), HasSubstr("data/0 is missing"));
}

// The export written from files, one tensor in memory at a time, is the
// export merged in memory, byte for byte, and holds every stage's blocks
// in block order and the input's tensors.
TEST_F(StateFile, AnExportStreamedFromFilesIsTheOneMergedInMemory) {
  const std::vector<std::string> stages = {Stage(0, 1), Stage(2, 2),
                                           Stage(8, 3), Stage(10, 4)};
  std::vector<std::filesystem::path> files;
  for (size_t j = 0; j < stages.size(); ++j) {
    files.push_back(Write(absl::StrCat("stage-", j, ".pt"), stages[j]));
  }
  petra::v1::Preprocessing input;
  input.add_mean(0.5);
  input.add_std(0.25);
  input.add_input_shape(1);
  input.add_input_shape(28);
  input.add_input_shape(28);
  std::string streamed;
  ASSERT_TRUE(WriteExport(files, input, [&](const char* d, size_t n) {
                streamed.append(d, n);
                return true;
              }).ok());
  absl::StatusOr<std::string> merged = MergeForExport(stages, input);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(streamed, *merged);

  absl::StatusOr<std::unique_ptr<StateFileReader>> reader =
      StateFileReader::OpenBytes(streamed);
  ASSERT_TRUE(reader.ok());
  auto exported = (*reader)->Read(StateFileReader::Tensors::kLoaded);
  ASSERT_TRUE(exported.ok()) << exported.status();
  std::vector<std::string> names;
  for (const auto& [name, t] : *exported) names.push_back(name);
  ASSERT_GE(names.size(), 8u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 8),
            (std::vector<std::string>{
                "blocks.0.conv.weight", "blocks.1.bn.running_mean",
                "blocks.2.conv.weight", "blocks.3.bn.running_mean",
                "blocks.8.conv.weight", "blocks.9.bn.running_mean",
                "blocks.10.conv.weight", "blocks.11.bn.running_mean"}));
  for (size_t i = 8; i < names.size(); ++i) {
    EXPECT_THAT(names[i], ::testing::StartsWith("input.")) << names[i];
  }
  const NamedTensors third = *DecodeStateFile(stages[2]);
  EXPECT_TRUE(
      torch::equal((*exported)[4].second, third.at("blocks.8.conv.weight")));

  // A stage file that is not there names its stage.
  files[1] = dir_ / "gone.pt";
  const absl::Status gone =
      WriteExport(files, input, [](const char*, size_t) { return true; });
  EXPECT_THAT(gone.message(), HasSubstr("stage 1: gone.pt is missing"));
  // A sink that refuses fails the write.
  files[1] = dir_ / "stage-1.pt";
  EXPECT_FALSE(WriteExport(files, input, [](const char*, size_t) {
                 return false;
               }).ok());
}

}  // namespace
}  // namespace petra::engine

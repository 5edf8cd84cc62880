#include "services/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "services/base/paths.h"

namespace petra::data {
namespace {

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/petra_data_XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { petra::base::RemoveTree(path_).IgnoreError(); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string BigEndian(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

std::string IdxImages(int n, int rows, int cols) {
  std::string s =
      BigEndian(0x803) + BigEndian(n) + BigEndian(rows) + BigEndian(cols);
  for (int i = 0; i < n * rows * cols; ++i) s.push_back(char(i % 251));
  return s;
}

std::string IdxLabels(int n) {
  std::string s = BigEndian(0x801) + BigEndian(n);
  for (int i = 0; i < n; ++i) s.push_back(char(i % 10));
  return s;
}

void Write(const std::string& path, const std::string& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), bytes.size());
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
}

TEST(ReadIdx, ReadsPlainAndGzipped) {
  TempDir dir;
  for (bool gz : {false, true}) {
    Write(dir.File("i"), IdxImages(5, 4, 3), gz);
    Write(dir.File("l"), IdxLabels(5), gz);
    absl::StatusOr<Dataset> d = ReadIdx(dir.File("i"), dir.File("l"));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_THAT(d->images.sizes(), ::testing::ElementsAre(5, 1, 4, 3));
    EXPECT_EQ(d->labels[3].item<int64_t>(), 3);
    EXPECT_EQ(d->images[1][0][0][0].item<uint8_t>(), 12);
    EXPECT_EQ(d->mean.size(), 1u);
  }
}

struct BadIdx {
  std::string name;
  std::string images, labels;
  std::string expected_file;  // "i" or "l"
  std::string expected_text;
};

void PrintTo(const BadIdx& c, std::ostream* os) { *os << c.name; }

class ReadIdxErrors : public ::testing::TestWithParam<BadIdx> {};

TEST_P(ReadIdxErrors, NameTheFile) {
  TempDir dir;
  Write(dir.File("i"), GetParam().images, false);
  Write(dir.File("l"), GetParam().labels, false);
  absl::StatusOr<Dataset> d = ReadIdx(dir.File("i"), dir.File("l"));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr(dir.File(GetParam().expected_file)));
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr(GetParam().expected_text));
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, ReadIdxErrors,
    ::testing::Values(
        BadIdx{"TruncatedImages", IdxImages(5, 4, 3).substr(0, 40),
               IdxLabels(5), "i", "truncated"},
        BadIdx{"TruncatedLabels", IdxImages(5, 4, 3),
               IdxLabels(5).substr(0, 10), "l", "truncated"},
        BadIdx{"BadImageMagic", "XXXX" + IdxImages(5, 4, 3).substr(4),
               IdxLabels(5), "i", "bad magic"},
        BadIdx{"LabelsSwapped", IdxLabels(5), IdxImages(5, 4, 3), "i",
               "bad magic"},
        BadIdx{"CountMismatch", IdxImages(5, 4, 3), IdxLabels(4), "l",
               "4 labels"},
        BadIdx{"EmptyFile", "", IdxLabels(5), "i", "too short"},
        BadIdx{"LabelOutOfRange", IdxImages(1, 2, 2),
               BigEndian(0x801) + BigEndian(1) + "\x20", "l", "label 32"}),
    [](const auto& info) { return info.param.name; });

TEST(ReadIdx, MissingFileIsNotFoundNamingIt) {
  absl::StatusOr<Dataset> d = ReadIdx("/nonexistent/a", "/nonexistent/b");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("/nonexistent/a"));
}

TEST(ReadIdx, CorruptGzipIsDataLoss) {
  TempDir dir;
  Write(dir.File("i.gz"), IdxImages(50, 8, 8), true);
  std::string bytes;
  {
    std::ifstream in(dir.File("i.gz"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  Write(dir.File("i.gz"), bytes.substr(0, bytes.size() / 2), false);
  Write(dir.File("l"), IdxLabels(50), false);
  absl::StatusOr<Dataset> d = ReadIdx(dir.File("i.gz"), dir.File("l"));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr(dir.File("i.gz")));
}

TEST(LoadSplits, FashionMnistFromDebiansPackage) {
  absl::StatusOr<Splits> s = LoadSplits(petra::v1::DATASET_KIND_FASHION_MNIST,
                                        PETRA_FASHION_MNIST_DIR);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train.size(), 60000);
  EXPECT_EQ(s->test.size(), 10000);
  EXPECT_THAT(s->train.images.sizes(),
              ::testing::ElementsAre(60000, 1, 28, 28));
  EXPECT_NEAR(s->train.mean[0], 0.286, 0.01);  // Fashion-MNIST's known mean
}

TEST(LoadSplits, CifarBinary) {
  TempDir dir;
  std::string record(1 + 3072, '\x07');
  record[0] = 3;
  for (int i = 1; i <= 5; ++i) {
    Write(dir.File("data_batch_" + std::to_string(i) + ".bin"), record + record,
          false);
  }
  Write(dir.File("test_batch.bin"), record, false);
  absl::StatusOr<Splits> s =
      LoadSplits(petra::v1::DATASET_KIND_CIFAR10, dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train.size(), 10);
  EXPECT_EQ(s->test.size(), 1);
  EXPECT_EQ(s->train.labels[4].item<int64_t>(), 3);
  EXPECT_THAT(s->train.images.sizes(), ::testing::ElementsAre(10, 3, 32, 32));

  Write(dir.File("test_batch.bin"), record.substr(0, 100), false);
  s = LoadSplits(petra::v1::DATASET_KIND_CIFAR10, dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("test_batch.bin"));
}

TEST(LoadSplits, MissingDirectory) {
  absl::StatusOr<Splits> s =
      LoadSplits(petra::v1::DATASET_KIND_MNIST, "/nonexistent/mnist");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("/nonexistent/mnist"));
}

TEST(MakeSynthetic, DeterministicForASeed) {
  Splits a = MakeSynthetic({1, 8, 8}, 4, 32, 8, 5);
  Splits b = MakeSynthetic({1, 8, 8}, 4, 32, 8, 5);
  Splits c = MakeSynthetic({1, 8, 8}, 4, 32, 8, 6);
  EXPECT_TRUE(torch::equal(a.train.images, b.train.images));
  EXPECT_TRUE(torch::equal(a.test.labels, b.test.labels));
  EXPECT_FALSE(torch::equal(a.train.images, c.train.images));
  EXPECT_EQ(a.train.size(), 32);
  EXPECT_EQ(a.train.labels.max().item<int64_t>() < 4, true);
}

// A synthetic set larger than memory fails the job's data loading, saying
// so; it once threw out of the job's thread and ended the coordinator.
TEST(LoadForJob, ASyntheticSetLargerThanMemoryIsResourceExhausted) {
  petra::v1::JobSpec spec;
  spec.mutable_model()->set_num_classes(10);
  spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_train_size(uint64_t{1} << 20);
  spec.mutable_dataset()->set_synthetic_test_size(8);
  // A million 3 x 256 x 256 samples: 800 GB of noise to draw.
  absl::StatusOr<Splits> s = LoadForJob(spec, "/nonexistent", {3, 256, 256});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("cannot make the synthetic set of 1048576 + 8"));
}

// An image folder's class count comes from its train/ folder when the spec
// leaves it out, and only then.
TEST(FillFromData, CountsAnImageFoldersClasses) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / "petra-fill-from-data";
  petra::base::RemoveTree(root).IgnoreError();
  for (const char* c : {"cat", "dog", "owl", "yak"}) {
    std::filesystem::create_directories(root / "pets" / "train" / c);
  }
  petra::v1::JobSpec spec;
  spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_IMAGE_FOLDER);
  spec.mutable_dataset()->set_path("pets");
  ASSERT_TRUE(FillFromData(&spec, root.string()).ok());
  EXPECT_EQ(spec.model().num_classes(), 4u);
  // Given, it stays (a mismatch is the loader's error, naming both).
  spec.mutable_model()->set_num_classes(7);
  ASSERT_TRUE(FillFromData(&spec, root.string()).ok());
  EXPECT_EQ(spec.model().num_classes(), 7u);
  // No folder: an error that says what could not be counted.
  spec.mutable_model()->clear_num_classes();
  spec.mutable_dataset()->set_path("birds");
  const absl::Status s = FillFromData(&spec, root.string());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("model.num_classes is not set"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("birds/train"));
  // Other datasets are left alone.
  petra::v1::JobSpec mnist;
  mnist.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_MNIST);
  ASSERT_TRUE(FillFromData(&mnist, root.string()).ok());
  EXPECT_FALSE(mnist.model().has_num_classes());
  petra::base::RemoveTree(root).IgnoreError();
}

}  // namespace
}  // namespace petra::data

#include "services/data/image_folder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>

#include <filesystem>
#include <numeric>
#include <string>

#include "services/base/paths.h"
#include "services/data/batches.h"
#include "services/data/dataset.h"
#include "services/data/test_images.h"

namespace petra::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempFolder {
 public:
  TempFolder() {
    char tmpl[] = "/tmp/petra-image-folder-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempFolder() { petra::base::RemoveTree(path_).IgnoreError(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// root/<split>/<class>/...: PNGs and JPEGs of two sizes, with a stray text
// file and an upper-case extension; classes made out of order.
void MakeFolder(const fs::path& root, const std::string& split, int per_class) {
  for (const std::string cls : {"zebra", "ant", "moth"}) {
    for (int i = 0; i < per_class; ++i) {
      const int h = i % 2 ? 16 : 10, w = i % 2 ? 24 : 12;
      const auto pixels = Pattern(h, w, 3);
      const fs::path dir = root / split / cls;
      if (i % 3 == 0) {
        WriteFile(dir / ("img" + std::to_string(i) + ".JPG"),
                  EncodeJpeg(pixels, h, w, 3, 90));
      } else {
        WriteFile(dir / ("img" + std::to_string(i) + ".png"),
                  EncodePng(pixels, h, w, PNG_COLOR_TYPE_RGB, 3));
      }
    }
    WriteFile(root / split / cls / "notes.txt", "not an image");
  }
}

TEST(ScanImageFolder, SortsClassesAndFilesAndIgnoresOtherFiles) {
  TempFolder t;
  MakeFolder(t.path(), "train", 4);
  absl::StatusOr<ImageFolderIndex> idx = ScanImageFolder(t.path() / "train");
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_THAT(idx->classes, ::testing::ElementsAre("ant", "moth", "zebra"));
  ASSERT_EQ(idx->files.size(), 12u);
  EXPECT_EQ(idx->files[0].filename(), "img0.JPG");
  EXPECT_EQ(idx->labels[0], 0);
  EXPECT_EQ(idx->labels[11], 2);
}

TEST(ScanImageFolder, RefusesBadLayoutsClearly) {
  TempFolder t;
  absl::StatusOr<ImageFolderIndex> idx = ScanImageFolder(t.path() / "train");
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(idx.status().message(), HasSubstr("is not a directory"));
  fs::create_directories(t.path() / "train");
  idx = ScanImageFolder(t.path() / "train");
  EXPECT_THAT(idx.status().message(), HasSubstr("has no class directories"));
  WriteFile(t.path() / "train" / "cat" / "readme.md", "x");
  idx = ScanImageFolder(t.path() / "train");
  EXPECT_THAT(idx.status().message(), HasSubstr("has no .jpg, .jpeg or .png"));
  MakeFolder(t.path(), "test", 1);
  const std::vector<std::string> classes = {"ant", "zebra"};
  idx = ScanImageFolder(t.path() / "test", &classes);
  EXPECT_THAT(idx.status().message(),
              HasSubstr("class \"moth\" is not among the training split's"));
}

TEST(ImageSource, ReadsTransformedDeterministicBatchesAndPrefetches) {
  TempFolder t;
  MakeFolder(t.path(), "train", 4);
  absl::StatusOr<ImageFolderIndex> idx = ScanImageFolder(t.path() / "train");
  ASSERT_TRUE(idx.ok());
  ImageSourceOptions o;
  o.height = o.width = 8;
  ImageSource source(*idx, o);
  absl::StatusOr<torch::Tensor> eval = source.Read({0, 1, 5}, false, 0);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->sizes(), (std::vector<int64_t>{3, 3, 8, 8}));
  EXPECT_EQ(eval->scalar_type(), torch::kUInt8);
  // The training crop depends on the seed, and only on it.
  absl::StatusOr<torch::Tensor> a = source.Read({1, 2}, true, 7);
  absl::StatusOr<torch::Tensor> b = source.Read({1, 2}, true, 7);
  absl::StatusOr<torch::Tensor> c = source.Read({1, 2}, true, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
  EXPECT_FALSE(torch::equal(*a, *c));
  // Decoded ahead by the workers: the same pixels.
  source.Prefetch({3, 4}, true, 9);
  source.Prefetch({5, 6}, true, 9);
  absl::StatusOr<torch::Tensor> ahead = source.Read({3, 4}, true, 9);
  ImageSource fresh(*idx, o);
  absl::StatusOr<torch::Tensor> direct = fresh.Read({3, 4}, true, 9);
  ASSERT_TRUE(ahead.ok() && direct.ok());
  EXPECT_TRUE(torch::equal(*ahead, *direct));
  EXPECT_FALSE(source.Read({12}, false, 0).ok());
}

TEST(ImageSource, CorruptFilesFailNamingThemOrAreSkippedAndCounted) {
  TempFolder t;
  MakeFolder(t.path(), "train", 2);
  const fs::path bad = t.path() / "train" / "ant" / "img1.png";
  WriteFile(bad, "\x89PNG\r\n\x1A\nbroken");
  absl::StatusOr<ImageFolderIndex> idx = ScanImageFolder(t.path() / "train");
  ASSERT_TRUE(idx.ok());
  ImageSourceOptions o;
  o.height = o.width = 8;
  ImageSource strict(*idx, o);
  absl::StatusOr<torch::Tensor> r = strict.Read({0, 1}, false, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(bad.string()));
  o.skip_corrupt = true;
  ImageSource lenient(*idx, o);
  r = lenient.Read({0, 1}, false, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(lenient.corrupt_skipped(), 1);
  // File 1 was replaced by file 2.
  absl::StatusOr<torch::Tensor> two = lenient.Read({2}, false, 0);
  EXPECT_TRUE(torch::equal((*r)[1], (*two)[0]));
}

// A corrupt file counts once, however often it is asked for: by its own
// row every epoch, and by the corrupt row before it that skips onto it.
TEST(ImageSource, EachCorruptFileCountsOnce) {
  TempFolder t;
  MakeFolder(t.path(), "train", 3);  // ant: img0.JPG, img1.png, img2.png
  for (const char* name : {"img1.png", "img2.png"}) {
    WriteFile(t.path() / "train" / "ant" / name, "\x89PNG\r\n\x1A\nbroken");
  }
  absl::StatusOr<ImageFolderIndex> idx = ScanImageFolder(t.path() / "train");
  ASSERT_TRUE(idx.ok());
  ImageSourceOptions o;
  o.height = o.width = 8;
  o.skip_corrupt = true;
  ImageSource source(*idx, o);
  std::vector<int64_t> all(idx->files.size());
  std::iota(all.begin(), all.end(), 0);
  for (int epoch = 0; epoch < 3; ++epoch) {
    ASSERT_TRUE(source.Read(all, epoch % 2 == 0, epoch).ok());
  }
  EXPECT_EQ(source.corrupt_skipped(), 2);
}

petra::v1::JobSpec FolderSpec(const fs::path& root) {
  petra::v1::JobSpec s;
  s.mutable_model()->set_variant(petra::v1::VARIANT_CIFAR);
  s.mutable_model()->set_num_classes(3);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_IMAGE_FOLDER);
  s.mutable_dataset()->set_path(root.string());
  s.mutable_dataset()->mutable_image_folder()->set_random_resized_crop(true);
  s.mutable_dataset()->mutable_augmentation()->set_normalize(true);
  s.set_seed(3);
  return s;
}

TEST(LoadForJob, StreamsAnImageFolderThroughTheBatches) {
  TempFolder t;
  MakeFolder(t.path(), "train", 6);
  MakeFolder(t.path(), "val", 2);
  petra::v1::JobSpec spec = FolderSpec(t.path());
  absl::StatusOr<Splits> s = LoadForJob(spec, "/", {3, 32, 32});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->train.images.defined());  // nothing decoded up front
  EXPECT_EQ(s->train.size(), 18);
  EXPECT_EQ(s->test.size(), 6);
  ASSERT_EQ(s->train.mean.size(), 3u);
  EXPECT_GT(s->train.std[0], 0);
  BatchOptions o;
  o.batch_size = 4;
  o.seed = 3;
  o.train_transform = true;
  EpochBatches epoch(s->train, o, 0);
  ASSERT_EQ(epoch.size(), 4);
  for (int64_t i = 0; i < epoch.size(); ++i) {
    absl::StatusOr<Batch> b = epoch.Get(i);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->images.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
    // Normalised with the measured statistics: values around 0.
    EXPECT_LT(std::abs(b->images.mean().item<double>()), 3.0);
  }
  // The same epoch again, built anew: the same batches.
  absl::StatusOr<Batch> again = EpochBatches(s->train, o, 0).Get(2);
  EXPECT_TRUE(torch::equal(again->images, epoch.Get(2)->images));

  // Measured once: a second load with a cache reads it back; a changed
  // folder is measured anew.
  LoadOptions cached;
  cached.cache_dir = (t.path() / "cache").string();
  s = LoadForJob(spec, "/", {3, 32, 32}, cached);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::vector<double> measured = s->train.mean;
  ASSERT_EQ(std::distance(fs::directory_iterator(t.path() / "cache"),
                          fs::directory_iterator()),
            1);
  const fs::path file = fs::directory_iterator(t.path() / "cache")->path();
  WriteFile(file, "mean 0.125 0.25 0.5\nstd 1 2 3\n");
  s = LoadForJob(spec, "/", {3, 32, 32}, cached);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train.mean, (std::vector<double>{0.125, 0.25, 0.5}));
  EXPECT_EQ(s->test.std, (std::vector<double>{1, 2, 3}));
  WriteFile(t.path() / "train" / "ant" / "extra.png",
            EncodePng(Pattern(4, 4, 3), 4, 4, PNG_COLOR_TYPE_RGB, 3));
  s = LoadForJob(spec, "/", {3, 32, 32}, cached);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->train.mean[0], 0.125);
  EXPECT_NEAR(s->train.mean[0], measured[0], 0.05);

  spec.mutable_model()->set_num_classes(10);
  s = LoadForJob(spec, "/", {3, 32, 32});
  EXPECT_THAT(s.status().message(),
              HasSubstr("has 3 classes but the model has 10"));
}

}  // namespace
}  // namespace petra::data

namespace petra::data {
namespace {

// What a submission checks of the data before the job is queued: the
// folders, not their files.
TEST(CheckDatasetFolder, NamesWhatIsMissingBeforeAnythingIsRead) {
  TempFolder t;
  petra::v1::JobSpec spec = FolderSpec(t.path() / "photos");
  absl::Status s = CheckDatasetFolder(spec, "/");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("is not a directory on the coordinator"));
  fs::create_directories(t.path() / "photos");
  s = CheckDatasetFolder(spec, "/");
  EXPECT_THAT(s.message(), HasSubstr("has no train/ folder"));
  MakeFolder(t.path() / "photos", "train", 1);
  s = CheckDatasetFolder(spec, "/");
  EXPECT_THAT(s.message(), HasSubstr("photos\" has no test/ (or val/) folder"));
  // The load itself says the same, not ".../val is not a directory".
  EXPECT_EQ(LoadForJob(spec, "/", {3, 32, 32}).status().message(), s.message());
  MakeFolder(t.path() / "photos", "val", 1);
  EXPECT_TRUE(CheckDatasetFolder(spec, "/").ok());
  // Outside the data root, as at load.
  s = CheckDatasetFolder(spec, (t.path() / "elsewhere").string());
  EXPECT_THAT(s.message(), HasSubstr("outside"));
  // Synthetic data has no folder to check.
  petra::v1::JobSpec synthetic;
  synthetic.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  EXPECT_TRUE(CheckDatasetFolder(synthetic, "/nonexistent").ok());
}

}  // namespace
}  // namespace petra::data

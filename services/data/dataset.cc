#include "services/data/dataset.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"
#include "services/base/usable_cores.h"
#include "services/data/image_folder.h"
#include "services/data/text_corpus.h"

namespace petra::data {

absl::StatusOr<std::string> ReadMaybeGzipped(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err = 0;
  const char* message = gzerror(f, &err);
  const bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  std::string why = failed ? message : "";
  gzclose(f);
  if (failed) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt or truncated (", why, ")"));
  }
  return out;
}

namespace {

// How a refused dataset path names the data root: its flag.
constexpr char kDataRoot[] = "--data-root";

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) |
         (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

// Pixel mean and std per channel, in [0, 1] units.
void ComputeStats(Dataset* d) {
  torch::Tensor x = d->images.to(torch::kFloat32).div_(255.0);
  torch::Tensor mean = x.mean({0, 2, 3});
  torch::Tensor std = x.std(/*dim=*/{0, 2, 3}, /*unbiased=*/false);
  d->mean.assign(mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel());
  d->std.assign(std.data_ptr<float>(), std.data_ptr<float>() + std.numel());
  for (double& s : d->std) s = std::max(s, 1e-3);
}

std::string FirstExisting(const std::string& dir, const std::string& name) {
  for (const std::string& candidate : {name + ".gz", name}) {
    std::string path = (std::filesystem::path(dir) / candidate).string();
    if (std::filesystem::exists(path)) return path;
  }
  return (std::filesystem::path(dir) / (name + ".gz")).string();
}

absl::StatusOr<Dataset> ReadCifarFiles(const std::vector<std::string>& paths) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  std::vector<std::string> contents;
  int64_t total = 0;
  for (const std::string& p : paths) {
    absl::StatusOr<std::string> bytes = ReadMaybeGzipped(p);
    if (!bytes.ok()) return bytes.status();
    if (bytes->empty() || bytes->size() % kRecord != 0) {
      return absl::DataLossError(absl::StrCat(
          p, ": ", bytes->size(), " bytes is not a whole number of ", kRecord,
          "-byte CIFAR-10 records (truncated or not CIFAR-10)"));
    }
    total += bytes->size() / kRecord;
    contents.push_back(std::move(*bytes));
  }
  Dataset d;
  d.images = torch::empty({total, 3, 32, 32}, torch::kUInt8);
  d.labels = torch::empty({total}, torch::kInt64);
  int64_t i = 0;
  for (size_t f = 0; f < contents.size(); ++f) {
    const std::string& c = contents[f];
    for (size_t at = 0; at < c.size(); at += kRecord, ++i) {
      const int label = uint8_t(c[at]);
      if (label > 9) {
        return absl::DataLossError(absl::StrCat(paths[f], ": record ",
                                                at / kRecord, " has label ",
                                                label, " (not 0-9)"));
      }
      d.labels[i] = label;
      std::memcpy(d.images[i].data_ptr<uint8_t>(), c.data() + at + 1,
                  kRecord - 1);
    }
  }
  ComputeStats(&d);
  return d;
}

// The first `limit` examples, after a seeded shuffle when `seed` is given.
Dataset Subset(const Dataset& d, uint64_t limit, std::optional<uint64_t> seed) {
  if (limit == 0 || limit >= static_cast<uint64_t>(d.size())) return d;
  Dataset s = d;
  torch::Tensor index = torch::arange(static_cast<int64_t>(limit));
  if (seed.has_value()) {
    torch::Generator gen = at::detail::createCPUGenerator(*seed);
    index = torch::randperm(d.size(), gen).narrow(0, 0, limit);
  }
  if (d.source != nullptr) {
    s.rows = d.rows.index_select(0, index);
  } else {
    s.images = d.images.index_select(0, index);
  }
  s.labels = d.labels.index_select(0, index);
  return s;
}

// The training split's normalisation, from the cache when it holds one for
// exactly these files and this geometry, else measured (and kept there).
absl::Status CachedNormalisation(ImageSource& source,
                                 const std::vector<int64_t>& chw,
                                 const std::string& cache_dir,
                                 std::vector<double>* mean,
                                 std::vector<double>* std) {
  std::filesystem::path cache;
  if (!cache_dir.empty()) {
    std::string key = absl::StrCat(chw[0], "x", chw[1], "x", chw[2], "\n");
    std::error_code ec;
    for (const std::filesystem::path& p : source.index().files) {
      const auto size = std::filesystem::file_size(p, ec);
      const auto time = std::filesystem::last_write_time(p, ec);
      absl::StrAppend(&key, p.string(), "\t", ec ? 0 : size, "\t",
                      time.time_since_epoch().count(), "\n");
    }
    cache = std::filesystem::path(cache_dir) /
            absl::StrCat("normalisation-", base::Sha256Hex(key).substr(0, 32),
                         ".txt");
    std::ifstream in(cache);
    std::vector<double> m(chw[0]), s(chw[0]);
    std::string word;
    bool ok = static_cast<bool>(in >> word) && word == "mean";
    for (double& v : m) ok = ok && static_cast<bool>(in >> v);
    ok = ok && static_cast<bool>(in >> word) && word == "std";
    for (double& v : s) ok = ok && static_cast<bool>(in >> v) && v > 0;
    if (ok) {
      *mean = m;
      *std = s;
      return absl::OkStatus();
    }
  }
  if (absl::Status m =
          MeasureNormalisation(source, kNormalisationSamples, mean, std);
      !m.ok()) {
    return m;
  }
  if (!cache.empty()) {
    std::ostringstream out;
    out.precision(17);
    out << "mean";
    for (double v : *mean) out << " " << v;
    out << "\nstd";
    for (double v : *std) out << " " << v;
    out << "\n";
    std::error_code ec;
    std::filesystem::create_directories(cache.parent_path(), ec);
    // A cache that cannot be written only costs the next load a
    // measurement.
    (void)base::WriteFileAtomically(cache, out.str());
  }
  return absl::OkStatus();
}

// An image folder's evaluation split: test/, or val/ where there is no
// test/; an error naming both when neither is there.
absl::StatusOr<std::filesystem::path> ImageFolderTestSplit(
    const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* name : {"test", "val"}) {
    if (std::filesystem::is_directory(dir / name, ec)) return dir / name;
  }
  return absl::NotFoundError(absl::StrCat(
      "image folder \"", dir.string(),
      "\" has no test/ (or val/) folder: the layout is ", kImageFolderLayout));
}

// Both splits of an image folder, streamed: train/ and test/ (or val/)
// under `dir`, labels by the training split's sorted classes.
absl::StatusOr<Splits> LoadImageFolder(const petra::v1::JobSpec& resolved,
                                       const std::filesystem::path& dir,
                                       const std::vector<int64_t>& chw,
                                       const LoadOptions& load) {
  absl::StatusOr<ImageFolderIndex> train = ScanImageFolder(dir / "train");
  if (!train.ok()) return train.status();
  absl::StatusOr<std::filesystem::path> test_dir = ImageFolderTestSplit(dir);
  if (!test_dir.ok()) return test_dir.status();
  absl::StatusOr<ImageFolderIndex> test =
      ScanImageFolder(*test_dir, &train->classes);
  if (!test.ok()) return test.status();
  const int64_t classes = static_cast<int64_t>(train->classes.size());
  if (classes != resolved.model().num_classes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder \"", dir.string(), "\" has ", classes,
        " classes but the model has ", resolved.model().num_classes(),
        " (model.num_classes, --num-classes)"));
  }
  const petra::v1::ImageFolderSpec& f = resolved.dataset().image_folder();
  ImageSourceOptions o;
  o.channels = chw[0];
  o.height = chw[1];
  o.width = chw[2];
  o.random_resized_crop = f.random_resized_crop();
  o.skip_corrupt = f.corrupt_images() ==
                   petra::v1::ImageFolderSpec::CORRUPT_IMAGE_POLICY_SKIP;
  o.workers = load.data_workers > 0
                  ? load.data_workers
                  : std::min(base::UsableCores(), kMaxDataWorkers);
  o.prefetch_batches =
      load.prefetch_batches > 0 ? load.prefetch_batches : 2 * o.workers;
  Splits s;
  for (auto [split, index] :
       {std::pair{&s.train, &*train}, std::pair{&s.test, &*test}}) {
    split->classes = classes;
    split->labels = torch::tensor(index->labels, torch::kInt64);
    split->rows = torch::arange(static_cast<int64_t>(index->files.size()));
    split->source = std::make_shared<ImageSource>(std::move(*index), o);
  }
  if (f.mean_size() > 0) {
    s.train.mean.assign(f.mean().begin(), f.mean().end());
    s.train.std.assign(f.std().begin(), f.std().end());
  } else if (absl::Status m =
                 CachedNormalisation(*s.train.source, chw, load.cache_dir,
                                     &s.train.mean, &s.train.std);
             !m.ok()) {
    return m;
  }
  s.test.mean = s.train.mean;
  s.test.std = s.train.std;
  return s;
}

}  // namespace

absl::StatusOr<Dataset> ReadIdx(const std::string& images_path,
                                const std::string& labels_path) {
  absl::StatusOr<std::string> images = ReadMaybeGzipped(images_path);
  if (!images.ok()) return images.status();
  absl::StatusOr<std::string> labels = ReadMaybeGzipped(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->size() < 16 || BigEndian32(*images, 0) != 0x00000803) {
    return absl::DataLossError(absl::StrCat(
        images_path,
        ": not an IDX image file (bad magic number or too short)"));
  }
  if (labels->size() < 8 || BigEndian32(*labels, 0) != 0x00000801) {
    return absl::DataLossError(absl::StrCat(
        labels_path,
        ": not an IDX label file (bad magic number or too short)"));
  }
  const int64_t n = BigEndian32(*images, 4);
  const int64_t rows = BigEndian32(*images, 8);
  const int64_t cols = BigEndian32(*images, 12);
  if (rows <= 0 || cols <= 0 || rows > 4096 || cols > 4096) {
    return absl::DataLossError(absl::StrCat(
        images_path, ": implausible image size ", rows, "x", cols));
  }
  if (static_cast<int64_t>(images->size()) != 16 + n * rows * cols) {
    return absl::DataLossError(absl::StrCat(
        images_path, ": header says ", n, " images of ", rows, "x", cols, " (",
        16 + n * rows * cols, " bytes) but the file has ", images->size(),
        " bytes (truncated?)"));
  }
  const int64_t n_labels = BigEndian32(*labels, 4);
  if (static_cast<int64_t>(labels->size()) != 8 + n_labels) {
    return absl::DataLossError(absl::StrCat(
        labels_path, ": header says ", n_labels, " labels but the file has ",
        labels->size() - 8, " (truncated?)"));
  }
  if (n_labels != n) {
    return absl::DataLossError(absl::StrCat(images_path, " has ", n,
                                            " images but ", labels_path,
                                            " has ", n_labels, " labels"));
  }
  Dataset d;
  d.images = torch::empty({n, 1, rows, cols}, torch::kUInt8);
  std::memcpy(d.images.data_ptr<uint8_t>(), images->data() + 16,
              n * rows * cols);
  torch::Tensor raw = torch::empty({n}, torch::kUInt8);
  std::memcpy(raw.data_ptr<uint8_t>(), labels->data() + 8, n);
  d.labels = raw.to(torch::kInt64);
  const int64_t max_label = n > 0 ? d.labels.max().item<int64_t>() : 0;
  if (max_label > 9) {
    return absl::DataLossError(
        absl::StrCat(labels_path, ": label ", max_label, " out of range 0-9"));
  }
  ComputeStats(&d);
  return d;
}

absl::StatusOr<Splits> LoadSplits(petra::v1::DatasetKind kind,
                                  const std::string& directory) {
  if (!std::filesystem::is_directory(directory)) {
    return absl::NotFoundError(
        absl::StrCat(directory, ": dataset directory does not exist"));
  }
  Splits s;
  if (kind == petra::v1::DATASET_KIND_FASHION_MNIST ||
      kind == petra::v1::DATASET_KIND_MNIST) {
    absl::StatusOr<Dataset> train =
        ReadIdx(FirstExisting(directory, "train-images-idx3-ubyte"),
                FirstExisting(directory, "train-labels-idx1-ubyte"));
    if (!train.ok()) return train.status();
    absl::StatusOr<Dataset> test =
        ReadIdx(FirstExisting(directory, "t10k-images-idx3-ubyte"),
                FirstExisting(directory, "t10k-labels-idx1-ubyte"));
    if (!test.ok()) return test.status();
    s.train = std::move(*train);
    s.test = std::move(*test);
  } else if (kind == petra::v1::DATASET_KIND_CIFAR10) {
    std::vector<std::string> train_files;
    for (int i = 1; i <= 5; ++i) {
      train_files.push_back((std::filesystem::path(directory) /
                             absl::StrCat("data_batch_", i, ".bin"))
                                .string());
    }
    absl::StatusOr<Dataset> train = ReadCifarFiles(train_files);
    if (!train.ok()) return train.status();
    absl::StatusOr<Dataset> test = ReadCifarFiles(
        {(std::filesystem::path(directory) / "test_batch.bin").string()});
    if (!test.ok()) return test.status();
    s.train = std::move(*train);
    s.test = std::move(*test);
  } else {
    return absl::InvalidArgumentError(
        "LoadSplits reads files; use MakeSynthetic");
  }
  // Normalise both splits with the training statistics.
  s.test.mean = s.train.mean;
  s.test.std = s.train.std;
  return s;
}

Splits MakeSynthetic(const std::vector<int64_t>& chw, int64_t classes,
                     int64_t train_size, int64_t test_size, uint64_t seed) {
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  torch::Tensor prototypes =
      torch::rand({classes, chw[0], chw[1], chw[2]}, gen) * 200 + 28;
  auto make = [&](int64_t n) {
    Dataset d;
    d.classes = classes;
    d.labels = torch::randint(classes, {n}, gen, torch::kInt64);
    torch::Tensor noise = torch::randn({n, chw[0], chw[1], chw[2]}, gen) * 40;
    d.images = (prototypes.index_select(0, d.labels) + noise)
                   .clamp(0, 255)
                   .to(torch::kUInt8);
    return d;
  };
  Splits s{make(train_size), make(test_size)};
  ComputeStats(&s.train);
  s.train.classes = s.test.classes = classes;
  s.test.mean = s.train.mean;
  s.test.std = s.train.std;
  return s;
}

absl::StatusOr<Splits> LoadForJob(const petra::v1::JobSpec& resolved,
                                  const std::string& data_root,
                                  const std::vector<int64_t>& chw,
                                  const LoadOptions& load) {
  const petra::v1::DatasetSpec& d = resolved.dataset();
  if (d.kind() == petra::v1::DATASET_KIND_TEXT) {
    return LoadText(resolved, data_root, load);
  }
  Splits s;
  if (d.kind() == petra::v1::DATASET_KIND_SYNTHETIC) {
    try {
      s = MakeSynthetic(chw, resolved.model().num_classes(),
                        static_cast<int64_t>(d.synthetic_train_size()),
                        static_cast<int64_t>(d.synthetic_test_size()),
                        resolved.seed());
    } catch (const std::exception& e) {
      // The sizes pass validation, but memory is the machine's to say (a
      // fuzzed job of a million 224x224 samples once ended the process).
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot make the synthetic set of ", d.synthetic_train_size(),
          " + ", d.synthetic_test_size(), " samples: ",
          std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
    }
  } else {
    // The path comes from a client: it may not leave the data root.
    absl::StatusOr<std::filesystem::path> dir =
        base::ConfinedPath(data_root, d.path(), "dataset.path",
                           base::AbsolutePath::kAllowInsideRoot, kDataRoot);
    if (!dir.ok()) return dir.status();
    if (d.kind() == petra::v1::DATASET_KIND_IMAGE_FOLDER) {
      absl::StatusOr<Splits> folder =
          LoadImageFolder(resolved, *dir, chw, load);
      if (!folder.ok()) return folder.status();
      folder->train = Subset(folder->train, d.train_limit(), resolved.seed());
      folder->test = Subset(folder->test, d.test_limit(), std::nullopt);
      return folder;
    }
    absl::StatusOr<Splits> loaded = LoadSplits(d.kind(), dir->string());
    if (!loaded.ok()) return loaded.status();
    s = std::move(*loaded);
  }
  std::vector<int64_t> got(s.train.images.sizes().begin() + 1,
                           s.train.images.sizes().end());
  if (got != chw) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset images are ", got[0], "x", got[1], "x", got[2],
        " but the model variant expects ", chw[0], "x", chw[1], "x", chw[2]));
  }
  s.train = Subset(s.train, d.train_limit(), resolved.seed());
  s.test = Subset(s.test, d.test_limit(), std::nullopt);
  return s;
}

petra::v1::Preprocessing PreprocessingOf(const petra::v1::JobSpec& resolved,
                                         const Splits& splits,
                                         const std::vector<int64_t>& chw) {
  petra::v1::Preprocessing p;
  *p.mutable_model() = resolved.model();
  if (resolved.dataset().kind() == petra::v1::DATASET_KIND_TEXT) {
    // Token ids in; no normalisation, no class names (the vocabulary).
    p.add_input_shape(resolved.model().transformer().seq_len());
    p.set_tokenizer_model(splits.tokenizer_model);
    return p;
  }
  if (resolved.dataset().augmentation().normalize()) {
    p.mutable_mean()->Add(splits.train.mean.begin(), splits.train.mean.end());
    p.mutable_std()->Add(splits.train.std.begin(), splits.train.std.end());
  }
  for (int64_t d : chw) p.add_input_shape(static_cast<uint32_t>(d));
  std::vector<std::string> names;
  switch (resolved.dataset().kind()) {
    case petra::v1::DATASET_KIND_FASHION_MNIST:
      // The dataset's own label names (Xiao et al. 2017).
      names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
      break;
    case petra::v1::DATASET_KIND_CIFAR10:
      names = {"airplane", "automobile", "bird",  "cat",  "deer",
               "dog",      "frog",       "horse", "ship", "truck"};
      break;
    case petra::v1::DATASET_KIND_IMAGE_FOLDER:
      if (splits.train.source != nullptr) {
        names = splits.train.source->classes();
      }
      break;
    default:  // MNIST's digits, and synthetic classes: their indices
      break;
  }
  if (names.empty()) {
    for (int64_t i = 0; i < splits.train.classes; ++i) {
      names.push_back(absl::StrCat(i));
    }
  }
  for (std::string& n : names) p.add_class_names(std::move(n));
  return p;
}

absl::Status FillFromData(petra::v1::JobSpec* spec,
                          const std::string& data_root) {
  const petra::v1::DatasetSpec& d = spec->dataset();
  if (d.kind() != petra::v1::DATASET_KIND_IMAGE_FOLDER ||
      spec->model().has_num_classes()) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::filesystem::path> dir =
      base::ConfinedPath(data_root, d.path(), "dataset.path",
                         base::AbsolutePath::kAllowInsideRoot, kDataRoot);
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::vector<std::string>> classes =
      ImageFolderClasses(*dir / "train");
  if (!classes.ok()) {
    return absl::Status(
        classes.status().code(),
        absl::StrCat("model.num_classes is not set and the image folder's "
                     "classes cannot be counted: ",
                     classes.status().message()));
  }
  spec->mutable_model()->set_num_classes(
      static_cast<uint32_t>(classes->size()));
  return absl::OkStatus();
}

absl::Status CheckDatasetFolder(const petra::v1::JobSpec& resolved,
                                const std::string& data_root) {
  const petra::v1::DatasetSpec& d = resolved.dataset();
  if (d.kind() == petra::v1::DATASET_KIND_SYNTHETIC) return absl::OkStatus();
  if (d.kind() == petra::v1::DATASET_KIND_TEXT) {
    // A folder or one file, or the embedded corpus: read when the job
    // starts (ReadTextSplits says what is wrong then).
    if (d.path().empty()) return absl::OkStatus();
    return base::ConfinedPath(data_root, d.path(), "dataset.path",
                              base::AbsolutePath::kAllowInsideRoot, kDataRoot)
        .status();
  }
  absl::StatusOr<std::filesystem::path> dir =
      base::ConfinedPath(data_root, d.path(), "dataset.path",
                         base::AbsolutePath::kAllowInsideRoot, kDataRoot);
  if (!dir.ok()) return dir.status();
  std::error_code ec;
  if (!std::filesystem::is_directory(*dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("dataset.path \"", d.path(), "\": \"", dir->string(),
                     "\" is not a directory on the coordinator"));
  }
  if (d.kind() != petra::v1::DATASET_KIND_IMAGE_FOLDER) {
    return absl::OkStatus();
  }
  if (!std::filesystem::is_directory(*dir / "train", ec)) {
    return absl::NotFoundError(absl::StrCat(
        "image folder \"", dir->string(),
        "\" has no train/ folder: the layout is ", kImageFolderLayout));
  }
  return ImageFolderTestSplit(*dir).status();
}

std::vector<int64_t> Dataset::Rows(const torch::Tensor& index) const {
  torch::Tensor r = rows.index_select(0, index).contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(),
                              r.data_ptr<int64_t>() + r.numel());
}

}  // namespace petra::data

// Image folders (torchvision's ImageFolder layout, root/<class>/<image>)
// streamed from disk: an index of files and labels in memory, pixels only
// for the batches being used. A pool of decode workers fills a bounded
// queue of the batches asked for next, so decoding overlaps training.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"

namespace petra::data {

struct ImageFolderIndex {
  std::vector<std::string> classes;  // sorted directory names
  std::vector<std::filesystem::path> files;
  std::vector<int64_t> labels;  // index into classes, per file
};

// Scans `split_dir`: each subdirectory is a class (sorted by name), each
// regular file in it ending in .jpg, .jpeg or .png (any case) an image
// (sorted by name); other files are ignored. NOT_FOUND naming the folder
// when it is missing; INVALID_ARGUMENT when it has no class or a class has
// no image. `classes`, when given, fixes the labels (the training split's):
// a class not among them is an error.
absl::StatusOr<ImageFolderIndex> ScanImageFolder(
    const std::filesystem::path& split_dir,
    const std::vector<std::string>* classes = nullptr);

// The classes of a split: its subdirectories' names, sorted (a class's
// label is its index). NOT_FOUND naming the folder when it is missing;
// INVALID_ARGUMENT when it has no subdirectory.
absl::StatusOr<std::vector<std::string>> ImageFolderClasses(
    const std::filesystem::path& split_dir);

// An image folder's layout, as errors about it spell it.
inline constexpr char kImageFolderLayout[] =
    "<dir>/{train,test}/<class>/<image>";

struct ImageSourceOptions {
  int64_t channels = 3, height = 32, width = 32;  // what Read returns
  // Training reads: a seeded random resized crop (else resize and centre
  // crop, as evaluation).
  bool random_resized_crop = true;
  // A file that does not decode: replaced by the next one that does
  // (counted), instead of failing the read.
  bool skip_corrupt = false;
  int workers = 2;               // decode threads, one core's work each
  int64_t prefetch_batches = 4;  // most batches decoded ahead and held
};

// Decodes and transforms the images of an index on demand.
class ImageSource {
 public:
  ImageSource(ImageFolderIndex index, ImageSourceOptions options);
  ~ImageSource();
  ImageSource(const ImageSource&) = delete;
  ImageSource& operator=(const ImageSource&) = delete;

  int64_t size() const { return static_cast<int64_t>(index_.files.size()); }
  const ImageFolderIndex& index() const { return index_; }

  // uint8 [B, C, H, W]: the images of `rows` (indices into the index),
  // the training transform seeded by `seed` when `train`. The same
  // arguments give the same pixels, whoever asks and whenever.
  // INVALID_ARGUMENT naming the file when one does not decode (unless
  // skip_corrupt) or cannot be read.
  // With `finish`, the result is finish(those images), computed by the
  // worker that decoded them (the batch's augmentation and normalisation:
  // the feed's whole per-batch work runs on the workers, in parallel).
  using Finish = std::function<torch::Tensor(torch::Tensor)>;
  absl::StatusOr<torch::Tensor> Read(const std::vector<int64_t>& rows,
                                     bool train, uint64_t seed,
                                     const Finish& finish = {});
  // Starts decoding these reads in the workers, if the queue has room; a
  // later Read with the same arguments (a `finish` or none alike) takes
  // the result. `finish` must not refer to anything that may end first.
  void Prefetch(const std::vector<int64_t>& rows, bool train, uint64_t seed,
                Finish finish = {});

  // How many batches a reader should ask to be decoded ahead of the one it
  // reads: all the source holds.
  int64_t prefetch_depth() const { return options_.prefetch_batches; }
  // Batches decoded and waiting to be read.
  int64_t ready() const;

  // The class names, label i's at i (the training split's sorted folders).
  const std::vector<std::string>& classes() const { return index_.classes; }

  // Files found not to decode so far, each counted once however often it
  // is asked for (every epoch, and by the rows before it that skip onto
  // it); replaced by the next file that decodes, and not read again.
  int64_t corrupt_skipped() const;

 private:
  // train, seed, rows, and whether the result is finished.
  using Key = std::tuple<bool, uint64_t, std::vector<int64_t>, bool>;
  struct Pending {
    bool done = false;
    absl::StatusOr<torch::Tensor> result = torch::Tensor();
    Finish finish;
  };
  absl::StatusOr<torch::Tensor> Decode(const std::vector<int64_t>& rows,
                                       bool train, uint64_t seed);
  absl::StatusOr<torch::Tensor> DecodeOne(int64_t row, bool train,
                                          uint64_t seed);
  void Work();

  const ImageFolderIndex index_;
  const ImageSourceOptions options_;
  // Records file `i` as corrupt; true the first time.
  bool MarkCorrupt(int64_t i);
  bool IsCorrupt(int64_t i) const;

  mutable std::mutex corrupt_mu_;
  std::vector<bool> corrupt_;  // by file index; guarded by corrupt_mu_
  int64_t corrupt_count_ = 0;  // guarded by corrupt_mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::shared_ptr<Pending>> pending_;
  std::deque<std::pair<Key, std::shared_ptr<Pending>>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// Per-channel mean and std (pixel values in [0, 1]) of up to `samples`
// images spread evenly over the source, with the evaluation transform.
absl::Status MeasureNormalisation(ImageSource& source, int64_t samples,
                                  std::vector<double>* mean,
                                  std::vector<double>* std);

}  // namespace petra::data

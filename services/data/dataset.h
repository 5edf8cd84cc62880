// Datasets held in memory: image classification's (the IDX format of MNIST
// and Fashion-MNIST, CIFAR-10's binary format, a learnable synthetic set)
// and text's tokens (text_corpus.h).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::data {

class ImageSource;  // image_folder.h

struct Dataset {
  torch::Tensor images;  // uint8 [N, C, H, W]; undefined when streamed
  torch::Tensor labels;  // int64 [N]
  int64_t classes = 10;
  // Per-channel mean and std of the pixel values in [0, 1], for
  // normalisation.
  std::vector<double> mean, std;
  // A streamed set (image folders): its examples are source's files
  // `rows` (int64 [N]), decoded when a batch is built.
  std::shared_ptr<ImageSource> source;
  torch::Tensor rows;
  // Text (DATASET_KIND_TEXT, text_corpus.h): the split's tokens, int64
  // [N], cut by batches.h into sequences of seq_len tokens and the seq_len
  // that follow each (the labels), from an offset that changes every epoch.
  torch::Tensor tokens;
  int64_t seq_len = 0;
  // At most this many sequences (train_limit / test_limit); 0: all.
  int64_t sequence_limit = 0;
  // Bytes of UTF-8 text the tokens came from: bits per byte.
  int64_t text_bytes = 0;
  // Their ratio, for bits per byte; 0 for images.
  double bytes_per_token() const {
    return tokens.defined() && tokens.numel() > 0
               ? static_cast<double>(text_bytes) /
                     static_cast<double>(tokens.numel())
               : 0.0;
  }
  // Examples: a text split's sequences (one held back, so that every
  // offset fits), else the labels'.
  int64_t size() const {
    if (!tokens.defined()) return labels.size(0);
    const int64_t n =
        seq_len > 0 ? std::max<int64_t>(0, (tokens.numel() - 1) / seq_len - 1)
                    : 0;
    return sequence_limit > 0 ? std::min(n, sequence_limit) : n;
  }
  // The source rows of examples `index` (int64).
  std::vector<int64_t> Rows(const torch::Tensor& index) const;
};

struct Splits {
  Dataset train, test;
  // Text under a SentencePiece tokenizer: its serialized model (empty for
  // bytes), which the job records and every export carries.
  std::string tokenizer_model;
};

// Reads a whole file through zlib, which also reads uncompressed files.
// NOT_FOUND when it cannot be opened, DATA_LOSS when corrupt or truncated.
absl::StatusOr<std::string> ReadMaybeGzipped(const std::string& path);

// Reads an IDX image file and its label file (gzipped or not). A missing,
// truncated or corrupt file is an error naming the file.
absl::StatusOr<Dataset> ReadIdx(const std::string& images_path,
                                const std::string& labels_path);

// Reads the train and test splits of a dataset kind from `directory`:
// IDX: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...
// CIFAR-10: data_batch_1..5.bin and test_batch.bin.
absl::StatusOr<Splits> LoadSplits(petra::v1::DatasetKind kind,
                                  const std::string& directory);

// A learnable synthetic set: each class is a random prototype image; a
// sample is its class prototype plus noise. Deterministic for `seed`.
Splits MakeSynthetic(const std::vector<int64_t>& chw, int64_t classes,
                     int64_t train_size, int64_t test_size, uint64_t seed);

// How a streamed set (image folders) is fed: decode threads, and batches
// decoded ahead and held (each a micro-batch of C x H x W bytes per image).
inline constexpr int kMaxDataWorkers = 64;
struct LoadOptions {
  // 0: one per core this process may use (base::UsableCores), at most
  // kMaxDataWorkers; else in [1, kMaxDataWorkers].
  int data_workers = 0;
  // Where an image folder's measured normalisation is kept, keyed by its
  // training files (paths, sizes, modification times) and the input
  // geometry, so it is measured once; empty: measured at every load.
  std::string cache_dir;
  // Batches decoded ahead and held; 0: twice the workers, so that every
  // worker has a batch to decode while the feed takes the ready ones.
  int64_t prefetch_batches = 0;
  // Text under a SentencePiece tokenizer: the model the job already has
  // (its record's), used as it is; empty: the one cached in cache_dir for
  // this training text and vocabulary, else trained (and cached).
  std::string tokenizer_model;
  // Told what the load is doing when a step takes long (training a
  // tokenizer, encoding text), for progress output; may be null.
  std::function<void(const std::string&)> on_activity;
};

// Training images image folders measure their normalisation on, spread
// over the split, when the spec gives none.
inline constexpr int64_t kNormalisationSamples = 1024;

// Loads what a resolved spec asks for (`data_root` prefixes relative paths),
// applying train_limit / test_limit. Image folders are indexed, not read:
// their batches decode as they are built (batches.h).
absl::StatusOr<Splits> LoadForJob(const petra::v1::JobSpec& resolved,
                                  const std::string& data_root,
                                  const std::vector<int64_t>& chw,
                                  const LoadOptions& load = {});

// What a model trained on `splits` (as `resolved` loaded them, images of
// `chw`) expects of its input: the normalisation its batches had (none when
// the job does not normalise), the input shape, the class names, the
// network (resolved.model()) and a language model's tokenizer.
petra::v1::Preprocessing PreprocessingOf(const petra::v1::JobSpec& resolved,
                                         const Splits& splits,
                                         const std::vector<int64_t>& chw);

// What only the data can say, filled in where the spec leaves it out: an
// image folder's class count (model.num_classes), from its train/ folder
// under `data_root`. Called where the data is (the coordinator at
// submission, `petra train`, `petra profile`), before the job is planned.
absl::Status FillFromData(petra::v1::JobSpec* spec,
                          const std::string& data_root);

// What can be checked of a resolved spec's data without reading it, when
// the job is submitted rather than when it starts: the path stays inside
// `data_root` and is a directory, and an image folder has its train/ and
// test/ (or val/) folders. Synthetic data passes.
absl::Status CheckDatasetFolder(const petra::v1::JobSpec& resolved,
                                const std::string& data_root);

}  // namespace petra::data

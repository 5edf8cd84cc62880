// Micro-batches of one epoch: seeded shuffle, augmentation (random crop with
// padding, horizontal flip) and per-channel normalisation; for text,
// sequences of tokens from an offset drawn for the epoch. Batch i of an
// epoch is the same whoever asks for it and in whatever order.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "services/data/dataset.h"

namespace petra::data {

struct Batch {
  // float32 [B, C, H, W], normalised; text's: the tokens, int64 [B, T].
  torch::Tensor images;
  // int64 [B]; text's: each token's next, int64 [B, T].
  torch::Tensor labels;
};

struct BatchOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  // Drop a last partial batch (training: every micro-batch the same size).
  bool drop_last = true;
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  bool normalize = true;
  uint64_t seed = 0;
  // A streamed set's training transform (image_folder.h) instead of the
  // evaluation one.
  bool train_transform = false;
};

class EpochBatches {
 public:
  EpochBatches(const Dataset& data, const BatchOptions& options, int64_t epoch);
  int64_t size() const { return count_; }
  // A streamed set's decoding can fail (a corrupt file under policy FAIL):
  // INVALID_ARGUMENT naming the file. OUT_OF_RANGE outside [0, size()).
  absl::StatusOr<Batch> Get(int64_t index) const;
  // A streamed set's batches decoded ahead and waiting to be read; 0 for a
  // set held in memory (it decodes nothing).
  int64_t Ready() const;

 private:
  uint64_t Seed(int64_t index) const;  // the batch's augmentation seed
  torch::Tensor Indices(int64_t index) const;

  const Dataset& data_;
  BatchOptions options_;
  int64_t epoch_;
  // Text: where the epoch's first sequence starts (0 without shuffle).
  int64_t text_offset_ = 0;
  torch::Tensor order_;
  int64_t count_;
};

}  // namespace petra::data

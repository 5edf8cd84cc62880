#include "services/data/batches.h"

#include "absl/strings/str_cat.h"
#include "services/data/image_folder.h"

namespace petra::data {

EpochBatches::EpochBatches(const Dataset& data, const BatchOptions& options,
                           int64_t epoch)
    : data_(data), options_(options), epoch_(epoch) {
  const int64_t n = data.size();
  if (options.shuffle) {
    torch::Generator gen = at::detail::createCPUGenerator(
        options.seed * 1000003 + static_cast<uint64_t>(epoch));
    order_ = torch::randperm(n, gen);
  } else {
    order_ = torch::arange(n);
  }
  count_ = options.drop_last
               ? n / options.batch_size
               : (n + options.batch_size - 1) / options.batch_size;
  // Text: every epoch cuts the stream at another offset (seeded like the
  // shuffle), so a sequence's boundaries are not always the same tokens'.
  if (data.tokens.defined() && options.shuffle && data.seq_len > 1) {
    torch::Generator gen = at::detail::createCPUGenerator(
        options.seed * 1000003 + static_cast<uint64_t>(epoch) + 7);
    text_offset_ = torch::randint(data.seq_len, {1}, gen).item<int64_t>();
  }
}

uint64_t EpochBatches::Seed(int64_t index) const {
  return (options_.seed * 1000003 + static_cast<uint64_t>(epoch_)) * 1000003 +
         static_cast<uint64_t>(index) + 1;
}

torch::Tensor EpochBatches::Indices(int64_t index) const {
  const int64_t begin = index * options_.batch_size;
  const int64_t len = std::min(options_.batch_size, data_.size() - begin);
  return order_.narrow(0, begin, len);
}

namespace {

// Batch images (uint8 [B, C, H, W]) as training or evaluation takes them:
// float in [0, 1], the augmentation seeded by `seed`, normalised. A pure
// function of its arguments, so a decode worker can run it for a batch
// whose EpochBatches is gone by then.
torch::Tensor Transform(const torch::Tensor& uint8_images, uint64_t seed,
                        const BatchOptions& options,
                        const std::vector<double>& mean_values,
                        const std::vector<double>& std_values) {
  torch::Tensor x = uint8_images.to(torch::kFloat32).div_(255.0);
  const int64_t len = x.size(0);
  const int64_t pad = options.crop_padding;
  if (pad > 0 || options.horizontal_flip) {
    // One generator per batch: the same batch is augmented the same way
    // however often and wherever it is built.
    torch::Generator gen = at::detail::createCPUGenerator(seed);
    const int64_t h = x.size(2), w = x.size(3);
    torch::Tensor padded =
        pad > 0 ? torch::constant_pad_nd(x, {pad, pad, pad, pad}, 0.0) : x;
    torch::Tensor offsets = torch::randint(2 * pad + 1, {len, 2}, gen);
    torch::Tensor flips = torch::rand({len}, gen) < 0.5;
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < len; ++i) {
      torch::Tensor s = padded[i];
      if (pad > 0) {
        s = s.narrow(1, offsets[i][0].item<int64_t>(), h)
                .narrow(2, offsets[i][1].item<int64_t>(), w);
      }
      if (options.horizontal_flip && flips[i].item<bool>()) s = s.flip({2});
      out.push_back(s);
    }
    x = torch::stack(out);
  }
  if (options.normalize) {
    const int64_t c = x.size(1);
    torch::Tensor mean = torch::tensor(mean_values, torch::kFloat64)
                             .to(torch::kFloat32)
                             .view({1, c, 1, 1});
    torch::Tensor std = torch::tensor(std_values, torch::kFloat64)
                            .to(torch::kFloat32)
                            .view({1, c, 1, 1});
    x = (x - mean) / std;
  }
  return x.contiguous();
}

}  // namespace

int64_t EpochBatches::Ready() const {
  return data_.source != nullptr ? data_.source->ready() : 0;
}

absl::StatusOr<Batch> EpochBatches::Get(int64_t index) const {
  if (index < 0 || index >= count_) {
    return absl::OutOfRangeError(
        absl::StrCat("batch ", index, " of ", count_, " requested"));
  }
  torch::Tensor idx = Indices(index);
  Batch b;
  if (data_.tokens.defined()) {
    // Sequence i: tokens [offset + i T, offset + (i + 1) T], the inputs
    // and, one further, their next tokens.
    const int64_t t = data_.seq_len;
    torch::Tensor starts = idx * t + text_offset_;
    torch::Tensor at = starts.unsqueeze(1) + torch::arange(t + 1).unsqueeze(0);
    torch::Tensor windows =
        data_.tokens.index_select(0, at.flatten()).view({idx.size(0), t + 1});
    b.images = windows.narrow(1, 0, t).contiguous();
    b.labels = windows.narrow(1, 1, t).contiguous();
    return b;
  }
  b.labels = data_.labels.index_select(0, idx);
  if (data_.source == nullptr) {
    b.images = Transform(data_.images.index_select(0, idx), Seed(index),
                         options_, data_.mean, data_.std);
    return b;
  }
  // Streamed: decode and transform this batch on the workers (or take it
  // from the queue), and start the next ones so they are ready when asked
  // for. The transform holds copies, not this object.
  auto finish = [this](int64_t i) -> ImageSource::Finish {
    return [seed = Seed(i), options = options_, mean = data_.mean,
            std = data_.std](torch::Tensor images) {
      return Transform(images, seed, options, mean, std);
    };
  };
  absl::StatusOr<torch::Tensor> images = data_.source->Read(
      data_.Rows(idx), options_.train_transform, Seed(index), finish(index));
  if (!images.ok()) return images.status();
  const int64_t ahead = data_.source->prefetch_depth();
  for (int64_t k = 1; k <= ahead && index + k < count_; ++k) {
    data_.source->Prefetch(data_.Rows(Indices(index + k)),
                           options_.train_transform, Seed(index + k),
                           finish(index + k));
  }
  b.images = *std::move(images);
  return b;
}

}  // namespace petra::data

#include "services/data/image_folder.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "services/base/small_file.h"
#include "services/data/image_decode.h"

namespace petra::data {
namespace {

namespace fs = std::filesystem;

// Largest image file read: far above any photo, far below memory trouble.
constexpr uint64_t kMaxImageFileBytes = 64ull << 20;
// Files replaced under skip_corrupt that are named in the log; the rest
// are only counted.
constexpr int64_t kLoggedSkips = 10;
// Evaluation's centre crop keeps this share of the shorter side (224/256).
constexpr double kCentreCropShare = 0.875;

bool IsImageFile(const fs::path& p) {
  const std::string ext = absl::AsciiStrToLower(p.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform doubles from a seed, the same on every platform (std's
// distributions are not).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  double Uniform(double lo, double hi) {
    state_ = SplitMix(state_);
    return lo + (hi - lo) * static_cast<double>(state_ >> 11) * 0x1.0p-53;
  }
  int64_t Int(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::min(hi, lo + static_cast<int64_t>(Uniform(0, hi - lo + 1)));
  }

 private:
  uint64_t state_;
};

torch::Tensor Resize(const torch::Tensor& chw, int64_t h, int64_t w) {
  namespace F = torch::nn::functional;
  torch::Tensor x = chw.unsqueeze(0).to(torch::kFloat32);
  x = F::interpolate(x, F::InterpolateFuncOptions()
                            .size(std::vector<int64_t>{h, w})
                            .mode(torch::kBilinear)
                            .align_corners(false)
                            .antialias(true));
  return x.squeeze(0).round_().clamp_(0, 255).to(torch::kUInt8);
}

// Resize so the target covers kCentreCropShare of the shorter side, then
// cut the centre.
torch::Tensor ResizeCentreCrop(const torch::Tensor& chw, int64_t h, int64_t w) {
  const int64_t ih = chw.size(1), iw = chw.size(2);
  const double scale =
      std::max(h / kCentreCropShare / ih, w / kCentreCropShare / iw);
  const int64_t rh = std::max<int64_t>(h, std::lround(ih * scale));
  const int64_t rw = std::max<int64_t>(w, std::lround(iw * scale));
  torch::Tensor r = Resize(chw, rh, rw);
  return r.narrow(1, (rh - h) / 2, h).narrow(2, (rw - w) / 2, w);
}

// torchvision's RandomResizedCrop: area share in [0.08, 1], log-uniform
// aspect ratio in [3/4, 4/3], ten tries, else the whole image.
torch::Tensor RandomResizedCrop(const torch::Tensor& chw, int64_t h, int64_t w,
                                Random& rng) {
  const int64_t ih = chw.size(1), iw = chw.size(2);
  const double area = static_cast<double>(ih * iw);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.Uniform(0.08, 1.0);
    const double ratio =
        std::exp(rng.Uniform(std::log(3.0 / 4.0), std::log(4.0 / 3.0)));
    const int64_t cw = std::lround(std::sqrt(target * ratio));
    const int64_t ch = std::lround(std::sqrt(target / ratio));
    if (cw > 0 && ch > 0 && cw <= iw && ch <= ih) {
      const int64_t top = rng.Int(0, ih - ch), left = rng.Int(0, iw - cw);
      return Resize(chw.narrow(1, top, ch).narrow(2, left, cw), h, w);
    }
  }
  return Resize(chw, h, w);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ImageFolderClasses(
    const fs::path& split_dir) {
  std::error_code ec;
  if (!fs::is_directory(split_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "image folder \"", split_dir.string(),
        "\" is not a directory (the layout is ", kImageFolderLayout, ")"));
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(split_dir, ec)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  if (ec) {
    return absl::NotFoundError(absl::StrCat(
        "cannot list \"", split_dir.string(), "\": ", ec.message()));
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder \"", split_dir.string(),
        "\" has no class directories (<class>/<image> inside it)"));
  }
  return names;
}

absl::StatusOr<ImageFolderIndex> ScanImageFolder(
    const fs::path& split_dir, const std::vector<std::string>* classes) {
  absl::StatusOr<std::vector<std::string>> names =
      ImageFolderClasses(split_dir);
  if (!names.ok()) return names.status();
  ImageFolderIndex out;
  std::error_code ec;
  for (const std::string& name : *names) {
    const fs::path dir = split_dir / name;
    int64_t label = static_cast<int64_t>(out.classes.size());
    if (classes != nullptr) {
      auto it = std::find(classes->begin(), classes->end(), name);
      if (it == classes->end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("image folder \"", split_dir.string(), "\": class \"",
                         name, "\" is not among the training split's"));
      }
      label = it - classes->begin();
    }
    out.classes.push_back(name);
    std::vector<fs::path> images;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file() && IsImageFile(e.path())) {
        images.push_back(e.path());
      }
    }
    std::sort(images.begin(), images.end());
    if (images.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image folder class \"", dir.string(),
                       "\" has no .jpg, .jpeg or .png file"));
    }
    for (fs::path& p : images) {
      out.files.push_back(std::move(p));
      out.labels.push_back(label);
    }
  }
  if (classes != nullptr) out.classes = *classes;
  return out;
}

ImageSource::ImageSource(ImageFolderIndex index, ImageSourceOptions options)
    : index_(std::move(index)), options_(options) {
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { Work(); });
  }
}

ImageSource::~ImageSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

int64_t ImageSource::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [key, pending] : pending_) n += pending->done ? 1 : 0;
  return n;
}

void ImageSource::Work() {
  // One worker is one core's work: the workers are the parallelism, and
  // torch's own threads inside each (the resize) would fight the others'
  // (measured: a second worker added nothing while each used both cores).
  at::set_num_threads(1);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [key, pending] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    absl::StatusOr<torch::Tensor> result =
        Decode(std::get<2>(key), std::get<0>(key), std::get<1>(key));
    if (result.ok() && pending->finish) result = pending->finish(*result);
    lock.lock();
    pending->result = std::move(result);
    pending->done = true;
    cv_.notify_all();
  }
}

void ImageSource::Prefetch(const std::vector<int64_t>& rows, bool train,
                           uint64_t seed, Finish finish) {
  std::lock_guard<std::mutex> lock(mu_);
  Key key{train, seed, rows, static_cast<bool>(finish)};
  if (pending_.count(key) > 0 ||
      static_cast<int64_t>(pending_.size()) >= options_.prefetch_batches) {
    return;
  }
  auto pending = std::make_shared<Pending>();
  pending->finish = std::move(finish);
  pending_.emplace(key, pending);
  queue_.emplace_back(std::move(key), std::move(pending));
  cv_.notify_one();
}

absl::StatusOr<torch::Tensor> ImageSource::Read(
    const std::vector<int64_t>& rows, bool train, uint64_t seed,
    const Finish& finish) {
  const Key key{train, seed, rows, static_cast<bool>(finish)};
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pending_.find(key);
    if (it != pending_.end()) {
      std::shared_ptr<Pending> p = it->second;
      cv_.wait(lock, [&] { return p->done; });
      pending_.erase(key);
      return std::move(p->result);
    }
    // A read nobody prefetched: what was decoded ahead and finished is for
    // reads that will not come (another order, an interrupted pass).
    for (auto i = pending_.begin(); i != pending_.end();) {
      i = i->second->done ? pending_.erase(i) : std::next(i);
    }
  }
  absl::StatusOr<torch::Tensor> images = Decode(rows, train, seed);
  if (images.ok() && finish) return finish(*images);
  return images;
}

int64_t ImageSource::corrupt_skipped() const {
  std::lock_guard<std::mutex> lock(corrupt_mu_);
  return corrupt_count_;
}

bool ImageSource::MarkCorrupt(int64_t i) {
  std::lock_guard<std::mutex> lock(corrupt_mu_);
  if (corrupt_.empty()) corrupt_.assign(index_.files.size(), false);
  if (corrupt_[i]) return false;
  corrupt_[i] = true;
  ++corrupt_count_;
  return true;
}

bool ImageSource::IsCorrupt(int64_t i) const {
  std::lock_guard<std::mutex> lock(corrupt_mu_);
  return !corrupt_.empty() && corrupt_[i];
}

absl::StatusOr<torch::Tensor> ImageSource::Decode(
    const std::vector<int64_t>& rows, bool train, uint64_t seed) {
  std::vector<torch::Tensor> images;
  images.reserve(rows.size());
  for (int64_t row : rows) {
    if (row < 0 || row >= size()) {
      return absl::OutOfRangeError(
          absl::StrCat("image ", row, " of ", size(), " requested"));
    }
    absl::StatusOr<torch::Tensor> img = DecodeOne(row, train, seed);
    if (!img.ok()) return img.status();
    images.push_back(*std::move(img));
  }
  return torch::stack(images);
}

absl::StatusOr<torch::Tensor> ImageSource::DecodeOne(int64_t row, bool train,
                                                     uint64_t seed) {
  const int64_t n = size();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = (row + k) % n;
    if (options_.skip_corrupt && IsCorrupt(i)) continue;
    const fs::path& file = index_.files[i];
    absl::StatusOr<std::string> bytes =
        base::ReadSmallFile(file.string(), kMaxImageFileBytes, "an image");
    absl::StatusOr<DecodedImage> img =
        bytes.ok() ? DecodeImage(*bytes, static_cast<int>(options_.channels),
                                 file.string())
                   : absl::StatusOr<DecodedImage>(bytes.status());
    if (!img.ok()) {
      if (!options_.skip_corrupt) {
        return absl::InvalidArgumentError(img.status().message());
      }
      if (MarkCorrupt(i)) {
        const int64_t skipped = corrupt_skipped();
        if (skipped <= kLoggedSkips) {
          // The message names the file.
          std::cerr << "image folder: skipping " << img.status().message()
                    << (skipped == kLoggedSkips
                            ? " (further skips counted only)"
                            : "")
                    << "\n";
        }
      }
      continue;
    }
    torch::Tensor chw =
        torch::from_blob(img->pixels.data(),
                         {img->height, img->width, img->channels},
                         torch::kUInt8)
            .permute({2, 0, 1});
    if (train && options_.random_resized_crop) {
      Random rng(SplitMix(seed ^ SplitMix(static_cast<uint64_t>(row))));
      return RandomResizedCrop(chw, options_.height, options_.width, rng)
          .contiguous();
    }
    return ResizeCentreCrop(chw, options_.height, options_.width).contiguous();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no image of the folder decodes (", n, " tried)"));
}

absl::Status MeasureNormalisation(ImageSource& source, int64_t samples,
                                  std::vector<double>* mean,
                                  std::vector<double>* std) {
  const int64_t n = std::min(samples, source.size());
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back(i * source.size() / n);
  torch::Tensor sum, sq;
  double count = 0;
  for (size_t at = 0; at < rows.size(); at += 64) {
    std::vector<int64_t> chunk(rows.begin() + at,
                               rows.begin() + std::min(rows.size(), at + 64));
    absl::StatusOr<torch::Tensor> x = source.Read(chunk, false, 0);
    if (!x.ok()) return x.status();
    torch::Tensor f = x->to(torch::kFloat64).div_(255.0);
    torch::Tensor s = f.sum({0, 2, 3}), q = f.pow(2).sum({0, 2, 3});
    sum = sum.defined() ? sum + s : s;
    sq = sq.defined() ? sq + q : q;
    count += static_cast<double>(f.numel() / f.size(1));
  }
  torch::Tensor m = sum / count;
  torch::Tensor v = (sq / count - m.pow(2)).clamp_min(1e-12).sqrt();
  mean->assign(m.data_ptr<double>(), m.data_ptr<double>() + m.numel());
  std->assign(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
  return absl::OkStatus();
}

}  // namespace petra::data

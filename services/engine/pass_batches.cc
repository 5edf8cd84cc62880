#include "services/engine/pass_batches.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace petra::engine {

PassBatches::PassBatches(std::vector<Part> parts) : parts_(std::move(parts)) {
  for (const Part& p : parts_) {
    starts_.push_back(size_);
    size_ += p.n;
  }
}

PassBatches::PassBatches(uint32_t epoch, const data::EpochBatches& batches,
                         int64_t n)
    : PassBatches(std::vector<Part>{{epoch, &batches, n}}) {}

PassBatches PassBatches::Strided(int64_t stride) const {
  PassBatches out = *this;
  const int64_t n = std::max<int64_t>(1, stride);
  out.offset_ = offset_ + stride_ * (n - 1);
  out.stride_ = stride_ * n;
  if (limit_ >= 0) out.limit_ = limit_ / n;
  return out;
}

PassBatches PassBatches::Dealt(int replica, int replicas) const {
  const int64_t r = std::max(1, replicas);
  PassBatches out = *this;
  out.limit_ = size() / r;
  out.offset_ = offset_ + stride_ * std::clamp<int64_t>(replica, 0, r - 1);
  out.stride_ = stride_ * r;
  return out;
}

std::pair<int, int64_t> PassBatches::Locate(int64_t i) const {
  const int64_t id = offset_ + i * stride_;
  // The last part starting at or before id.
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), id);
  const int part = std::max(0, static_cast<int>(it - starts_.begin()) - 1);
  return {part, parts_[part].first + id - starts_[part]};
}

absl::StatusOr<data::Batch> PassBatches::Get(int64_t id) const {
  if (id < 0 || id >= size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "micro-batch ", id, " is not in the pass's [0, ", size(), ")"));
  }
  const auto [part, index] = Locate(id);
  return parts_[part].batches->Get(index);
}

int64_t PassBatches::Ready(int64_t id) const {
  if (id < 0 || id >= size()) return 0;
  return parts_[Locate(id).first].batches->Ready();
}

std::vector<PassResult> SplitIntoEpochs(const PassResult& whole,
                                        const PassBatches& batches) {
  const int parts = static_cast<int>(batches.parts().size());
  std::vector<PassResult> out(parts);
  std::vector<double> last(parts, 0);
  for (const MicroBatchOutcome& m : whole.kept) {
    const auto [part, index] = batches.Locate(m.id);
    out[part].Record(index, m.loss, m.correct, m.samples, true);
    out[part].kept.back().at = m.at;
    last[part] = std::max(last[part], m.at);
  }
  double previous = 0;
  for (int i = 0; i < parts; ++i) {
    const double end = i + 1 == parts ? whole.seconds : last[i];
    out[i].seconds = std::max(0.0, end - previous);
    previous = end;
  }
  return out;
}

}  // namespace petra::engine

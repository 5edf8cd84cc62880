#include "services/engine/stage_memory.h"

#include <algorithm>

namespace petra::engine {

int64_t TensorBytes(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const torch::Tensor& t : ts) {
    if (t.defined()) n += t.numel() * t.element_size();
  }
  return n;
}

void MemoryLedger::Keep(int64_t buffer_bytes, int64_t stash_bytes) {
  buffer_bytes_ += buffer_bytes;
  stash_bytes_ += stash_bytes;
}

void MemoryLedger::Free(int64_t buffer_bytes, int64_t stash_bytes) {
  buffer_bytes_ -= buffer_bytes;
  stash_bytes_ -= stash_bytes;
}

void MemoryLedger::Observe(int64_t parameters_bytes,
                           int64_t optimizer_state_bytes) {
  peak_buffer_bytes_ = std::max(peak_buffer_bytes_, buffer_bytes_);
  peak_stash_bytes_ = std::max(peak_stash_bytes_, stash_bytes_);
  peak_bytes_ = std::max(peak_bytes_, parameters_bytes + optimizer_state_bytes +
                                          buffer_bytes_ + stash_bytes_);
}

MemoryStats MemoryLedger::Stats(int64_t parameters_bytes,
                                int64_t optimizer_state_bytes) const {
  MemoryStats m;
  m.parameters_bytes = parameters_bytes;
  m.optimizer_state_bytes = optimizer_state_bytes;
  m.activation_buffer_bytes = buffer_bytes_;
  m.weight_stash_bytes = stash_bytes_;
  m.peak_bytes = peak_bytes_;
  m.peak_activation_buffer_bytes = peak_buffer_bytes_;
  m.peak_weight_stash_bytes = peak_stash_bytes_;
  return m;
}

}  // namespace petra::engine

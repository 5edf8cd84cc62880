// What a stage holds, by kind, and the highest it has held: the numbers
// behind petra_stage_memory_bytes and the paper's Table 3.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace petra::engine {

struct MemoryStats {
  int64_t parameters_bytes = 0;       // parameters and BN running statistics
  int64_t optimizer_state_bytes = 0;  // momentum buffers and accumulated grads
  int64_t activation_buffer_bytes = 0;
  int64_t weight_stash_bytes = 0;
  int64_t peak_bytes = 0;  // highest sum of the four since construction
  int64_t peak_activation_buffer_bytes = 0;
  int64_t peak_weight_stash_bytes = 0;
  // The stage's device as its allocator sees it (model/device_memory.h):
  // zero on the CPU; shared by the stages of one device.
  int64_t device_bytes = 0;
  int64_t device_reserved_bytes = 0;
  int64_t device_peak_bytes = 0;
  // The CPU tensors the stage's threads allocated (model/host_memory.h):
  // live now, and the highest since the stage was built.
  int64_t host_tensor_bytes = 0;
  int64_t host_tensor_peak_bytes = 0;
  // The highest host_tensor_bytes inside training passes only.
  int64_t host_tensor_train_peak_bytes = 0;
};

// Bytes of the defined tensors.
int64_t TensorBytes(const std::vector<torch::Tensor>& tensors);

// The buffers a stage keeps between a forward and its backward (inputs and
// weight copies), and the peaks of everything it holds.
class MemoryLedger {
 public:
  void Keep(int64_t buffer_bytes, int64_t stash_bytes);
  void Free(int64_t buffer_bytes, int64_t stash_bytes);
  // Records this moment for the peaks: the buffers with the model's own
  // bytes as they are now.
  void Observe(int64_t parameters_bytes, int64_t optimizer_state_bytes);
  MemoryStats Stats(int64_t parameters_bytes,
                    int64_t optimizer_state_bytes) const;

 private:
  int64_t buffer_bytes_ = 0;
  int64_t stash_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t peak_buffer_bytes_ = 0;
  int64_t peak_stash_bytes_ = 0;
};

}  // namespace petra::engine

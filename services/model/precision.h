// Mixed precision (training.precision): bf16 autocast inside a block's
// functions, fp32 residual streams between them. Autocast is thread-local
// in libtorch, so whatever computes for a stage (its thread, a rebuild
// helper) opens its own scope.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace petra::model {

// bf16 autocast for `device`'s kind on this thread while alive; with `on`
// false nothing changes. Autocast's cache of cast weights is off inside:
// a copy cast under NoGradGuard (a forward) and reused with a graph (a
// rebuild in the same call) would carry no gradient to its weight, and a
// cached copy would outlive the optimizer step that changed the weight.
class ScopedAutocast {
 public:
  ScopedAutocast(c10::DeviceType device, bool on);
  ~ScopedAutocast();
  ScopedAutocast(const ScopedAutocast&) = delete;
  ScopedAutocast& operator=(const ScopedAutocast&) = delete;

 private:
  const c10::DeviceType device_;
  const bool on_;
  bool was_enabled_ = false;
  bool was_caching_ = true;
  c10::ScalarType was_dtype_ = c10::ScalarType::BFloat16;
};

// Whether autocast is on for `device`'s kind on this thread (a helper
// thread copies it).
bool AutocastOn(c10::DeviceType device);

// A block function's output, which autocast may have computed in bf16,
// in the dtype of the stream `like` it joins (fp32); itself when it
// already is, so fp32 runs add no operation.
at::Tensor AsStream(const at::Tensor& t, const at::Tensor& like);

// `t` in fp32 when it is a reduced-precision float (bf16, fp16); else
// itself. What a block hands to the next one.
at::Tensor ToFullPrecision(const at::Tensor& t);

}  // namespace petra::model

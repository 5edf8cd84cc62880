#include "services/model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace petra::model {
namespace {

// torch 2.4 made autocast's setters take the device kind; Debian's 1.13 has
// one setter per kind. Only CPU and CUDA stages exist.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool Enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void SetEnabled(c10::DeviceType d, bool on) {
  at::autocast::set_autocast_enabled(d, on);
}
c10::ScalarType Dtype(c10::DeviceType d) {
  return at::autocast::get_autocast_dtype(d);
}
void SetDtype(c10::DeviceType d, c10::ScalarType t) {
  at::autocast::set_autocast_dtype(d, t);
}
#else
bool Enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                   : at::autocast::is_enabled();
}
void SetEnabled(c10::DeviceType d, bool on) {
  if (d == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
c10::ScalarType Dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                   : at::autocast::get_autocast_gpu_dtype();
}
void SetDtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(t);
  } else {
    at::autocast::set_autocast_gpu_dtype(t);
  }
}
#endif

bool Reduced(c10::ScalarType t) {
  return t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half;
}

}  // namespace

ScopedAutocast::ScopedAutocast(c10::DeviceType device, bool on)
    : device_(device), on_(on) {
  if (!on_) return;
  was_enabled_ = Enabled(device_);
  was_dtype_ = Dtype(device_);
  was_caching_ = at::autocast::is_autocast_cache_enabled();
  SetEnabled(device_, true);
  SetDtype(device_, c10::ScalarType::BFloat16);
  at::autocast::set_autocast_cache_enabled(false);
  at::autocast::increment_nesting();
}

ScopedAutocast::~ScopedAutocast() {
  if (!on_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_cache_enabled(was_caching_);
  SetEnabled(device_, was_enabled_);
  SetDtype(device_, was_dtype_);
}

bool AutocastOn(c10::DeviceType device) { return Enabled(device); }

at::Tensor AsStream(const at::Tensor& t, const at::Tensor& like) {
  if (!t.defined() || t.scalar_type() == like.scalar_type()) return t;
  return t.to(like.scalar_type());
}

at::Tensor ToFullPrecision(const at::Tensor& t) {
  if (!t.defined() || !Reduced(t.scalar_type())) return t;
  return t.to(c10::ScalarType::Float);
}

}  // namespace petra::model

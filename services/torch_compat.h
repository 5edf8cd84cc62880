// What differs between the libtorch versions PETRA fleet builds against
// (Debian's 1.13 on the CPU machines and in CI, the GPU hosts' pip torch
// 2.x), kept here so the engine has no version #ifs. Each helper deduces
// the difference from the types themselves.
#pragma once

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace petra {

// The key of a parameter's entry in torch::optim::Optimizer::state():
// libtorch 1.13 keys it by the TensorImpl's address printed as a string
// (c10::guts::to_string, which torch 2 no longer has), torch 2.x by the
// address itself. A template so that only the branch of the libtorch in use
// is compiled.
template <typename Optimizer>
auto OptimizerStateKey(const Optimizer& optimizer, const at::Tensor& param) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return Key(key.str());
  } else {
    return Key(param.unsafeGetTensorImpl());
  }
}

}  // namespace petra

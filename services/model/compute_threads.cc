#include "services/model/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

namespace petra::model {
namespace {

using SetBlasThreads = void (*)(int);

// Looked up rather than linked: the BLAS behind libtorch is the system's
// choice (OpenBLAS on Debian, MKL or none elsewhere).
SetBlasThreads OpenBlasSetter() {
  static const SetBlasThreads setter = [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return SetBlasThreads{};
    return reinterpret_cast<SetBlasThreads>(
        dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  }();
  return setter;
}

}  // namespace

void SetComputeThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  if (SetBlasThreads set = OpenBlasSetter()) set(threads);
}

}  // namespace petra::model

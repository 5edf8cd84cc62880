// GPU tests (suites named Gpu*, labelled `gpu` by cmake/PetraTests.cmake)
// skip with the reason where this build or machine has no CUDA device; CTest
// then reports them as skipped, not passed.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#define PETRA_REQUIRE_CUDA()                                               \
  do {                                                                     \
    if (!torch::cuda::is_available()) {                                    \
      GTEST_SKIP() << "needs a CUDA device: this libtorch "                \
                   << (torch::cuda::device_count() == 0 ? "sees no GPU"    \
                                                        : "cannot use it") \
                   << " (build with scripts/gpu/build.sh on a GPU host)";  \
    }                                                                      \
  } while (0)

namespace petra::test_support {

// Full float32 on the GPU (no TF32) and deterministic cuDNN algorithms: the
// GPU tests compare with CPU references and across runners, and TF32's
// 10-bit mantissa alone would exceed their tolerances.
inline void UseExactGpuMath() {
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

}  // namespace petra::test_support

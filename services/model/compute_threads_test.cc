#include "services/model/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace petra::model {
namespace {

TEST(ComputeThreads, SetsTorchAndOpenBlasThreads) {
  const int torch_before = at::get_num_threads();
  SetComputeThreads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
  SetComputeThreads(0);  // at least one
  EXPECT_EQ(at::get_num_threads(), 1);

  using Get = int (*)();
  auto get =
      reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (get == nullptr) {
    GTEST_SKIP() << "this libtorch's BLAS is not OpenBLAS";
  }
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) {
    GTEST_SKIP() << "OPENBLAS_NUM_THREADS is set, and it wins";
  }
  SetComputeThreads(2);
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_EQ(get(), 2);
  SetComputeThreads(1);
  EXPECT_EQ(get(), 1);
  SetComputeThreads(torch_before);
}

}  // namespace
}  // namespace petra::model

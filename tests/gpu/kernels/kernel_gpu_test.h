// What the kernels' GPU tests (tests/gpu/kernels/<op>_gpu_test.cc) share: the error measure and
// the fixture that skips without a CUDA device or without the kernels, and turns them on.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/kernels/dispatch.h"

namespace adctl::kernel_test {

// ‖a − b‖ / ‖b‖.
inline double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).norm() / b.to(torch::kDouble).norm())
      .item<double>();
}

class FusedOpsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!FusedKernelsBuilt()) GTEST_SKIP() << "built without the CUDA kernels";
    SetFusedKernels(true);
  }
};

}  // namespace adctl::kernel_test

// What the kernels' CPU tests (tests/worker/kernels/<op>_test.cc) share.
#pragma once

#include <torch/torch.h>

namespace adctl::kernel_test {

inline double MaxRelative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

}  // namespace adctl::kernel_test

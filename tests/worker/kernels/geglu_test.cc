// GEGLU's formulas on the CPU (worker/kernels/geglu.h): the reference math the CUDA kernels
// implement (tests/gpu/kernels/geglu_gpu_test.cc compares them) must give the values and gradients
// of LibTorch's composition under autograd.
#include "worker/kernels/geglu.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/geglu_internal.h"

namespace adctl {
namespace {

using kernel_test::MaxRelative;

TEST(FusedGeglu, ValuesAndGradientsAreTheComposition) {
  torch::manual_seed(11);
  for (const auto& shape : {std::vector<int64_t>{2, 5, 12}, std::vector<int64_t>{3, 14}}) {
    auto h = (torch::randn(shape, torch::kDouble) * 2).requires_grad_();
    auto dout_shape = shape;
    dout_shape.back() /= 2;
    auto dout = torch::randn(dout_shape, torch::kDouble);
    auto parts = h.chunk(2, -1);
    auto ref = parts[0] * torch::gelu(parts[1]);
    auto ref_dh = torch::autograd::grad({ref}, {h}, {dout})[0];
    auto out = FusedGeglu(h);
    auto dh = torch::autograd::grad({out}, {h}, {dout})[0];
    EXPECT_LT(MaxRelative(out, ref), 1e-12);
    EXPECT_LT(MaxRelative(dh, ref_dh), 1e-10);
  }
}

TEST(FusedGeglu, Float32WithinRounding) {
  torch::manual_seed(3);
  auto h = torch::randn({4, 64}).requires_grad_();
  auto dout = torch::randn({4, 32});
  auto parts = h.chunk(2, -1);
  auto ref_dh = torch::autograd::grad({parts[0] * torch::gelu(parts[1])}, {h}, {dout})[0];
  auto dh = torch::autograd::grad({FusedGeglu(h)}, {h}, {dout})[0];
  EXPECT_LT(MaxRelative(dh, ref_dh), 1e-5);
}

}  // namespace
}  // namespace adctl

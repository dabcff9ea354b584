// The linear layer with the fused bias gradient on the CPU (worker/kernels/linear.h): the reference
// math the CUDA kernels implement (tests/gpu/kernels/linear_gpu_test.cc compares them) must give
// the values and gradients of LibTorch's composition under autograd.
#include "worker/kernels/linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/linear_internal.h"

namespace adctl {
namespace {

using kernel_test::MaxRelative;

TEST(FusedLinear, ValuesAndGradientsAreLinears) {
  torch::manual_seed(12);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto x = torch::randn({3, 5, 6}, opts).requires_grad_();
  auto w = torch::randn({4, 6}, opts).requires_grad_();
  auto b = torch::randn({4}, opts).requires_grad_();
  auto dy = torch::randn({3, 5, 4}, opts);
  auto ref = torch::linear(x, w, b);
  auto ref_grads = torch::autograd::grad({ref}, {x, w, b}, {dy});
  auto out = FusedLinear(x, w, b);
  auto grads = torch::autograd::grad({out}, {x, w, b}, {dy});
  EXPECT_LT(MaxRelative(out, ref), 1e-12);
  for (int i = 0; i < 3; ++i) EXPECT_LT(MaxRelative(grads[i], ref_grads[i]), 1e-12) << i;
  // Frozen x and weight: only the bias trains.
  auto xf = x.detach(), wf = w.detach();
  auto only_b = torch::autograd::grad({FusedLinear(xf, wf, b)}, {b}, {dy})[0];
  EXPECT_LT(MaxRelative(only_b, ref_grads[2]), 1e-12);
  try {
    FusedLinear(x, w, torch::zeros({3}, opts));
    FAIL() << "a [3] bias for 4 outputs accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("takes a [4] bias"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace adctl

// The linear layer's bias-gradient kernel (worker/kernels/linear.cu) against LibTorch's composition
// on the same GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding
// of the fp32 result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/linear.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

// A motion module's projection at 16×256² batch 8 ([8·1024, 16, 320] → 320, fp32 weight and bias
// cast to bf16 as the layers do) and odd widths (the one-column path): values and gradients of
// LibTorch's linear, the bias's within bf16 rounding of the fp32 sum (fp32: 1e-5).
TEST_F(FusedOpsGpuTest, LinearBiasGradientIsTheRowSum) {
  torch::manual_seed(10);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const auto& dims :
       {std::vector<int64_t>{8192, 16, 320, 320}, std::vector<int64_t>{5, 7, 13, 9}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto x = torch::randn({dims[0], dims[1], dims[2]}, o).to(dtype);
      auto w32 = torch::randn({dims[3], dims[2]}, o).mul_(0.05).requires_grad_();
      auto b32 = torch::randn({dims[3]}, o).requires_grad_();
      auto dy = torch::randn({dims[0], dims[1], dims[3]}, o).to(dtype);
      auto truth = torch::linear(x.to(torch::kFloat), w32.to(dtype).to(torch::kFloat), b32);
      auto tg = torch::autograd::grad({truth}, {w32, b32}, {dy.to(torch::kFloat)});
      auto out = Linear(x, w32.to(dtype), b32.to(dtype));
      ASSERT_EQ(out.scalar_type(), dtype);
      auto g = torch::autograd::grad({out}, {w32, b32}, {dy});
      const double tol = dtype == torch::kFloat ? 1e-5 : 8e-3;
      EXPECT_LT(RelativeError(out, truth), tol) << dims << " " << dtype;
      EXPECT_LT(RelativeError(g[0], tg[0]), tol) << "dw " << dims << " " << dtype;
      EXPECT_LT(RelativeError(g[1], tg[1]), tol) << "db " << dims << " " << dtype;
    }
  }
}

}  // namespace
}  // namespace adctl

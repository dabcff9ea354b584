// The token transpose kernels (worker/kernels/token_transpose.cu) against LibTorch's composition on
// the same GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of
// the fp32 result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/token_transpose.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;

// The token layout changes are exact: a transpose moves values, and the residual add rounds
// fp32's sum once, as LibTorch's add does.
TEST_F(FusedOpsGpuTest, TransposesAreExact) {
  torch::manual_seed(8);
  // A motion module's clip at 32² (batch 8: [8, 16·320, 1024]), a transformer's [128, 320, 1024],
  // the smallest level, and edges that are not multiples of the 32 × 32 tiles.
  for (const auto& dims :
       {std::vector<int64_t>{8, 5120, 1024}, std::vector<int64_t>{128, 320, 1024},
        std::vector<int64_t>{8, 20480, 16}, std::vector<int64_t>{3, 37, 45}}) {
    for (const auto dtype : {torch::kBFloat16, torch::kFloat, torch::kHalf}) {
      const auto o = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      auto x = torch::randn(dims, o).requires_grad_();
      auto t = TransposeTokens(x);
      ASSERT_TRUE(t.is_contiguous());
      EXPECT_TRUE(torch::equal(t, x.transpose(1, 2))) << dims << " " << dtype;
      auto dt = torch::randn_like(t);
      EXPECT_TRUE(torch::equal(torch::autograd::grad({t}, {x}, {dt})[0], dt.transpose(1, 2)));

      auto r = torch::randn(dims, o).requires_grad_();
      auto y = torch::randn({dims[0], dims[2], dims[1]}, o).requires_grad_();
      auto sum = AddTransposed(r, y);
      ASSERT_TRUE(sum.is_contiguous());
      EXPECT_TRUE(torch::equal(sum, r + y.transpose(1, 2))) << dims << " " << dtype;
      auto ds = torch::randn_like(sum);
      auto g = torch::autograd::grad({sum}, {r, y}, {ds});
      EXPECT_TRUE(torch::equal(g[0], ds));
      EXPECT_TRUE(torch::equal(g[1], ds.transpose(1, 2)));
    }
  }
}

}  // namespace
}  // namespace adctl

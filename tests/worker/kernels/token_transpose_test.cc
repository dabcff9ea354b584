// The token transposes on the CPU (worker/kernels/token_transpose.h): the reference math the CUDA
// kernels implement (tests/gpu/kernels/token_transpose_gpu_test.cc compares them) must give the
// values and gradients of LibTorch's composition under autograd.
#include "worker/kernels/token_transpose.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/token_transpose_internal.h"

namespace adctl {
namespace {

TEST(FusedTranspose, ValuesAndGradientsAreTheTransposedView) {
  torch::manual_seed(9);
  auto x = torch::randn({2, 3, 5}, torch::kDouble).requires_grad_();
  auto t = FusedTranspose(x);
  ASSERT_TRUE(t.is_contiguous());
  EXPECT_TRUE(torch::equal(t, x.transpose(1, 2)));
  auto dt = torch::randn({2, 5, 3}, torch::kDouble);
  EXPECT_TRUE(torch::equal(torch::autograd::grad({t}, {x}, {dt})[0], dt.transpose(1, 2)));
}

TEST(FusedAddTransposed, ValuesAndGradientsAreTheComposition) {
  torch::manual_seed(10);
  auto x = torch::randn({2, 4, 6}, torch::kDouble).requires_grad_();
  auto y = torch::randn({2, 6, 4}, torch::kDouble).requires_grad_();
  auto ds = torch::randn({2, 4, 6}, torch::kDouble);
  auto ref = x + y.transpose(1, 2);
  auto ref_g = torch::autograd::grad({ref}, {x, y}, {ds});
  auto out = FusedAddTransposed(x, y);
  ASSERT_TRUE(out.is_contiguous());
  EXPECT_TRUE(torch::allclose(out, ref));
  auto g = torch::autograd::grad({out}, {x, y}, {ds});
  EXPECT_TRUE(torch::equal(g[0], ref_g[0]));
  EXPECT_TRUE(torch::equal(g[1], ref_g[1]));
  // y in another dtype: its gradient comes back in that dtype.
  auto yf = y.detach().to(torch::kFloat).requires_grad_();
  auto gf = torch::autograd::grad({FusedAddTransposed(x, yf)}, {yf}, {ds})[0];
  EXPECT_EQ(gf.scalar_type(), torch::kFloat);
}

TEST(FusedAddTransposed, NamesShapesThatDoNotTranspose) {
  try {
    FusedAddTransposed(torch::zeros({2, 4, 6}), torch::zeros({2, 4, 6}));
    FAIL() << "[2, 4, 6] + [2, 4, 6]ᵀ accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected x [B, R, S] and y [B, S, R]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace adctl

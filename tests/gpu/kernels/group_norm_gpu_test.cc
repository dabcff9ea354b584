// The GroupNorm (+ SiLU) kernels (worker/kernels/group_norm.cu) against LibTorch's composition on
// the same GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of
// the fp32 result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/dispatch.h"
#include "worker/kernels/group_norm.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

struct Shape {
  std::vector<int64_t> dims;
  int64_t groups;
};

// SD1.5's shapes at 16×256² (128 frames folded into the batch; hw 1024 … 16, also an up-block's
// concatenated 960 channels), and odd ones that take the scalar path.
const std::vector<Shape> kGroupNormShapes = {{{128, 320, 32, 32}, 32}, {{128, 960, 32, 32}, 32},
                                             {{128, 1280, 4, 4}, 32},  {{3, 64, 5, 3}, 32},
                                             {{2, 6, 7}, 3},           {{16, 2560, 8, 8}, 32}};

// GroupNorm with SiLU (the ResNets) or without (the transformers and motion modules), the kernels
// against LibTorch's operations.
torch::Tensor GroupNormComposition(const torch::Tensor& x, int64_t groups, const torch::Tensor& w,
                                   const torch::Tensor& b, double eps, bool silu) {
  auto y = torch::group_norm(x, groups, w, b, eps);
  return silu ? torch::silu(y) : y;
}

torch::Tensor GroupNormKernels(const torch::Tensor& x, int64_t groups, const torch::Tensor& w,
                               const torch::Tensor& b, double eps, bool silu) {
  return silu ? GroupNormSilu(x, groups, w, b, eps) : GroupNormPlain(x, groups, w, b, eps);
}

TEST_F(FusedOpsGpuTest, GroupNormSiluMatchesTheCompositionInFp32) {
  torch::manual_seed(1);
  for (const bool silu : {true, false}) {
    for (const auto& s : kGroupNormShapes) {
      const auto o = torch::TensorOptions().device(torch::kCUDA);
      auto x = (torch::randn(s.dims, o) * 2 + 0.5).requires_grad_();
      auto w = torch::randn({s.dims[1]}, o), b = torch::randn({s.dims[1]}, o);
      auto dy = torch::randn(s.dims, o);
      auto ref = GroupNormComposition(x, s.groups, w, b, 1e-5, silu);
      auto ref_dx = torch::autograd::grad({ref}, {x}, {dy})[0];
      auto out = GroupNormKernels(x, s.groups, w, b, 1e-5, silu);
      auto dx = torch::autograd::grad({out}, {x}, {dy})[0];
      EXPECT_LT(RelativeError(out, ref), 1e-5) << s.dims << " silu " << silu;
      EXPECT_LT(RelativeError(dx, ref_dx), 1e-5) << s.dims << " silu " << silu;
    }
  }
}

// γ and β train in the motion modules' GroupNorm (without SiLU; with it for completeness): their
// gradients by the affine kernel, fp32 within 1e-5 of LibTorch's; bf16 activations with the fp32
// parameters cast as the layers do, within bf16 rounding of the fp32 truth.
TEST_F(FusedOpsGpuTest, GroupNormSiluTrainsItsWeightAndBias) {
  torch::manual_seed(2);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const bool silu : {true, false}) {
    auto x = torch::randn({8, 64, 6, 6}, o).requires_grad_();
    auto w = torch::randn({64}, o).requires_grad_(), b = torch::randn({64}, o).requires_grad_();
    auto dy = torch::randn_like(x);
    auto ref =
        torch::autograd::grad({GroupNormComposition(x, 32, w, b, 1e-6, silu)}, {x, w, b}, {dy});
    auto got = torch::autograd::grad({GroupNormKernels(x, 32, w, b, 1e-6, silu)}, {x, w, b}, {dy});
    for (int i = 0; i < 3; ++i) EXPECT_LT(RelativeError(got[i], ref[i]), 1e-5) << i << " " << silu;

    auto xb = (torch::randn({16, 320, 16, 16}, o) * 2 + 0.5).to(torch::kBFloat16);
    auto w32 = torch::randn({320}, o).requires_grad_(),
         b32 = torch::randn({320}, o).requires_grad_();
    auto dyb = torch::randn({16, 320, 16, 16}, o).to(torch::kBFloat16);
    auto truth = torch::autograd::grad(
        {GroupNormComposition(xb.to(torch::kFloat), 32, w32.to(torch::kBFloat16).to(torch::kFloat),
                              b32.to(torch::kBFloat16).to(torch::kFloat), 1e-6, silu)},
        {w32, b32}, {dyb.to(torch::kFloat)});
    auto bf = torch::autograd::grad(
        {GroupNormKernels(xb, 32, w32.to(torch::kBFloat16), b32.to(torch::kBFloat16), 1e-6, silu)},
        {w32, b32}, {dyb});
    EXPECT_LT(RelativeError(bf[0], truth[0]), 8e-3) << "bf16 dw " << silu;
    EXPECT_LT(RelativeError(bf[1], truth[1]), 8e-3) << "bf16 db " << silu;
  }
}

TEST_F(FusedOpsGpuTest, GroupNormSiluInBf16IsWithinBf16RoundingOfFp32) {
  torch::manual_seed(3);
  for (const bool silu : {true, false}) {
    for (const auto& s : kGroupNormShapes) {
      const auto o = torch::TensorOptions().device(torch::kCUDA);
      auto x32 = torch::randn(s.dims, o) * 2 + 0.5;
      auto w32 = torch::randn({s.dims[1]}, o), b32 = torch::randn({s.dims[1]}, o);
      auto dy32 = torch::randn(s.dims, o);
      // The fp32 truth of the bf16 inputs.
      auto x = x32.to(torch::kBFloat16), w = w32.to(torch::kBFloat16), b = b32.to(torch::kBFloat16);
      auto dy = dy32.to(torch::kBFloat16);
      auto xt = x.to(torch::kFloat).requires_grad_();
      auto truth =
          GroupNormComposition(xt, s.groups, w.to(torch::kFloat), b.to(torch::kFloat), 1e-5, silu);
      auto truth_dx = torch::autograd::grad({truth}, {xt}, {dy.to(torch::kFloat)})[0];
      auto xb = x.clone().requires_grad_();
      auto out = GroupNormKernels(xb, s.groups, w, b, 1e-5, silu);
      auto dx = torch::autograd::grad({out}, {xb}, {dy})[0];
      ASSERT_EQ(out.scalar_type(), torch::kBFloat16);
      EXPECT_LT(RelativeError(out, truth), 8e-3) << s.dims << " silu " << silu;
      EXPECT_LT(RelativeError(dx, truth_dx), 8e-3) << s.dims << " silu " << silu;
    }
  }
}

// The channels-last kernels (the UNet's layout on CUDA): SD1.5's feature maps at 16×256² batch 8
// stored NHWC, a motion module's 5-D clip view (statistics over a clip's frames), a far-off mean
// (the shifted sums), odd widths (narrow vectors); values, x's gradient and trained γ, β against
// LibTorch's GroupNorm of the same values, fp32 within 1e-5, bf16 within bf16 rounding. The
// output keeps the input's layout.
TEST_F(FusedOpsGpuTest, ChannelsLastGroupNormMatchesTheComposition) {
  torch::manual_seed(11);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  struct Case {
    std::vector<int64_t> dims;    // NCHW sizes of the stored channels-last map
    int64_t groups, clip_frames;  // clip_frames > 0: normalised as [B, C, F, H, W] clips
    double shift;
  };
  const std::vector<Case> cases = {
      {{128, 320, 32, 32}, 32, 0, 0.5}, {{128, 960, 32, 32}, 32, 0, 0.5},
      {{128, 1280, 4, 4}, 32, 0, 0.5},  {{128, 320, 32, 32}, 32, 16, 0.5},
      {{16, 640, 16, 16}, 32, 16, 0.5}, {{32, 320, 8, 8}, 32, 0, 40.0},
      {{6, 12, 5, 3}, 3, 0, 0.5},       {{4, 96, 7, 5}, 32, 2, 0.5}};
  for (const auto& k : cases) {
    for (const bool silu : {true, false}) {
      for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
        const int64_t c = k.dims[1];
        auto stored = (torch::randn(k.dims, o) * 2 + k.shift)
                          .to(dtype)
                          .contiguous(at::MemoryFormat::ChannelsLast);
        auto view = [&](const torch::Tensor& t) {
          if (k.clip_frames == 0) return t;
          return t.view({k.dims[0] / k.clip_frames, k.clip_frames, c, k.dims[2], k.dims[3]})
              .permute({0, 2, 1, 3, 4});
        };
        auto x = view(stored).detach().requires_grad_();
        ASSERT_TRUE(IsChannelsLast(x));
        auto w = torch::randn({c}, o).requires_grad_(), b = torch::randn({c}, o).requires_grad_();
        auto dy = torch::randn(x.sizes(), o).to(dtype);
        auto xt = x.detach().to(torch::kFloat).contiguous().requires_grad_();
        auto wt = w.detach().to(dtype).to(torch::kFloat).requires_grad_();
        auto bt = b.detach().to(dtype).to(torch::kFloat).requires_grad_();
        auto truth = GroupNormComposition(xt, k.groups, wt, bt, 1e-5, silu);
        auto tg = torch::autograd::grad({truth}, {xt, wt, bt}, {dy.to(torch::kFloat)});
        auto out = GroupNormKernels(x, k.groups, w.to(dtype), b.to(dtype), 1e-5, silu);
        EXPECT_TRUE(IsChannelsLast(out)) << k.dims;
        auto g = torch::autograd::grad({out}, {x, w, b}, {dy});
        const double tol = dtype == torch::kFloat ? 1e-5 : 8e-3;
        const std::string what = ::testing::PrintToString(k.dims) + " frames " +
                                 std::to_string(k.clip_frames) + " silu " + std::to_string(silu) +
                                 " " + std::string(c10::toString(dtype));
        EXPECT_LT(RelativeError(out, truth), tol) << what;
        EXPECT_LT(RelativeError(g[0], tg[0]), tol) << "dx " << what;
        EXPECT_LT(RelativeError(g[1], tg[1]), tol) << "dw " << what;
        EXPECT_LT(RelativeError(g[2], tg[2]), tol) << "db " << what;
        // x used again beside its norm (a residual): that use's gradient added in the pass,
        // packed, or a channel slice of a wider map (a skip connection's, out of its
        // concatenation's backward: read in place).
        auto [y2, r2] = GroupNormResidual(x, k.groups, w.to(dtype), b.to(dtype), 1e-5, silu);
        auto dr = torch::randn(x.sizes(), o).to(dtype);
        auto gr = torch::autograd::grad({y2, r2 * 1}, {x}, {dy, dr}, /*retain_graph=*/true)[0];
        EXPECT_TRUE(IsChannelsLast(gr)) << what;
        EXPECT_LT(RelativeError(gr, tg[0] + dr.to(torch::kFloat)), tol) << "dx + dres " << what;
        auto joined = torch::cat({r2, torch::zeros_like(r2)}, 1);
        auto wide = torch::empty_like(joined).normal_();
        auto gs = torch::autograd::grad({y2, joined}, {x}, {dy, wide})[0];
        EXPECT_LT(RelativeError(gs, tg[0] + wide.narrow(1, 0, c).to(torch::kFloat)), tol)
            << "dx + sliced dres " << what;
      }
    }
  }
}

}  // namespace
}  // namespace adctl

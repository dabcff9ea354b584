// The fused CUDA kernels (worker/kernels/fused_ops_cuda.cu) against LibTorch's composition on the
// same GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of
// the fp32 result; and the UNet's bf16 output and gradients with the kernels against fp32.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>

#include "worker/kernels/fused_ops.h"
#include "worker/model/weights.h"

#if defined(ADCTL_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace adctl {
namespace {

// ‖a − b‖ / ‖b‖.
double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
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

// LayerNorm (+ the motion modules' position table) at SD1.5's token shapes at 16×256² batch 8:
// a transformer's [8·16, 1024, 320] (frozen affine), a motion module's [8·1024, 16, 320] and
// [8·16, 16, 1280] with the table and trainable fp32 γ, β; CLIP's [4, 77, 768]; an odd number
// of rows (21: the last warp of the two-rows-a-warp kernels has one); widths the one-element
// path takes (13) and one past the kernels (bf16 2560: LibTorch's layer_norm, which rounds γ's
// and β's gradients to bf16); and a view that starts off a 16-byte boundary. fp32 within 1e-5 of
// the composition; bf16 within bf16 rounding of the fp32 truth, the kernels' γ and β gradients
// (summed in fp32) within 1e-3.
TEST_F(FusedOpsGpuTest, LayerNormMatchesTheComposition) {
  torch::manual_seed(9);
  struct Case {
    std::vector<int64_t> dims;
    bool table, train_affine;
  };
  const std::vector<Case> cases = {{{128, 1024, 320}, false, false}, {{8192, 16, 320}, true, true},
                                   {{128, 16, 1280}, true, true},    {{512, 16, 640}, true, true},
                                   {{4, 77, 768}, false, false},     {{6, 16, 13}, true, true},
                                   {{7, 3, 320}, true, true},        {{64, 2560}, false, true}};
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const auto& k : cases) {
    const int64_t c = k.dims.back();
    auto x32 = torch::randn(k.dims, o) * 3 + 0.5;
    auto w = torch::randn({c}, o), b = torch::randn({c}, o);
    auto table = k.table ? torch::randn({k.dims[1], c}, o) : torch::Tensor();
    auto d32 = torch::randn(k.dims, o);
    auto composition = [&](const torch::Tensor& x, const torch::Tensor& wt,
                           const torch::Tensor& bt) {
      auto y = torch::layer_norm(x, {c}, wt, bt, 1e-5);
      return k.table ? y + table.to(x.scalar_type()) : y;
    };
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      // The truth: fp32 composition of the (rounded) inputs.
      auto x = x32.to(dtype), dy = d32.to(dtype);
      auto xt = x.to(torch::kFloat).requires_grad_();
      auto wt = w.clone().requires_grad_(), bt = b.clone().requires_grad_();
      auto truth = composition(xt, wt, bt);
      auto tg = torch::autograd::grad({truth}, {xt, wt, bt}, {dy.to(torch::kFloat)});
      auto xk = x.clone().requires_grad_();
      auto wk = w.clone().requires_grad_(k.train_affine),
           bk = b.clone().requires_grad_(k.train_affine);
      auto out = LayerNorm(xk, wk, bk, 1e-5, table);
      ASSERT_EQ(out.scalar_type(), dtype);
      const bool fp32 = dtype == torch::kFloat;
      const double tol = fp32 ? 1e-5 : 8e-3;
      EXPECT_LT(RelativeError(out, truth), tol) << k.dims << " " << dtype;
      std::vector<torch::Tensor> inputs = {xk};
      if (k.train_affine) inputs.insert(inputs.end(), {wk, bk});
      auto g = torch::autograd::grad({out}, inputs, {dy});
      EXPECT_LT(RelativeError(g[0], tg[0]), tol) << "dx " << k.dims << " " << dtype;
      if (k.train_affine) {
        ASSERT_EQ(g[1].scalar_type(), torch::kFloat);
        // LibTorch's layer_norm (past the kernels' widths) rounds them to bf16 on the way.
        const double affine_tol = fp32 ? 1e-5 : (c > 2048 ? 8e-3 : 1e-3);
        EXPECT_LT(RelativeError(g[1], tg[1]), affine_tol) << "dw " << k.dims << " " << dtype;
        EXPECT_LT(RelativeError(g[2], tg[2]), affine_tol) << "db " << k.dims << " " << dtype;
      }
    }
  }
  // The residual pass-through (x + f(LayerNorm(x))): x's gradient sums both uses in the kernel.
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto x32 = torch::randn({2048, 16, 320}, o) * 2;
    auto w = torch::randn({320}, o), table = torch::randn({16, 320}, o);
    auto d32 = torch::randn({2048, 16, 320}, o);
    auto xt = x32.to(dtype).to(torch::kFloat).requires_grad_();
    auto truth = (torch::layer_norm(xt, {320}, w, {}, 1e-5) + table).sigmoid() + xt;
    auto truth_dx = torch::autograd::grad({truth}, {xt}, {d32.to(dtype).to(torch::kFloat)})[0];
    auto xk = x32.to(dtype).requires_grad_();
    auto [h, r] = LayerNormResidual(xk, w, {}, 1e-5, table);
    auto out = h.sigmoid() + r;
    auto dx = torch::autograd::grad({out}, {xk}, {d32.to(dtype)})[0];
    const double tol = dtype == torch::kFloat ? 1e-5 : 8e-3;
    EXPECT_LT(RelativeError(out, truth), tol) << "residual " << dtype;
    EXPECT_LT(RelativeError(dx, truth_dx), tol) << "residual dx " << dtype;
  }
  // A row-major view starting one element in: copied to an aligned buffer, same result.
  auto base = torch::randn({1 + 64 * 320}, o.dtype(torch::kBFloat16));
  auto view = base.narrow(0, 1, 64 * 320).view({64, 320});
  auto w = torch::randn({320}, o);
  EXPECT_LT(RelativeError(LayerNorm(view, w, {}, 1e-5),
                          torch::layer_norm(view.to(torch::kFloat), {320}, w, {}, 1e-5)),
            8e-3);
}

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

// The ResNets' sums on channels-last maps (SD1.5's 320 channels at 32×32, 16 frames a clip; odd
// channels on the scalar path): the kernel's one rounding of a + b + bias, and bias's gradient
// summed over each clip's frames.
TEST_F(FusedOpsGpuTest, ChannelBiasSumsAreTheFp32SumRoundedOnce) {
  torch::manual_seed(13);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  for (const auto& dims :
       {std::vector<int64_t>{32, 320, 32, 32}, std::vector<int64_t>{6, 3, 5, 7}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      for (const int64_t rows : {int64_t{1}, dims[0] / 2}) {
        SCOPED_TRACE(::testing::Message() << dims << " " << dtype << " bias rows " << rows);
        auto a = torch::randn(dims, o).to(dtype).contiguous(cl).requires_grad_();
        auto b = torch::randn(dims, o).to(dtype).contiguous(cl).requires_grad_();
        auto bias = torch::randn({rows, dims[1]}, o).requires_grad_();
        ASSERT_TRUE(ChannelBiasKernelApplies(a));
        const auto per_sample =
            bias.detach().repeat_interleave(dims[0] / rows, 0).view({dims[0], dims[1], 1, 1});
        auto truth = (a.detach().to(torch::kFloat) + b.detach().to(torch::kFloat) + per_sample);
        auto out = AddChannelBias(a, b, bias);
        ASSERT_EQ(out.scalar_type(), dtype);
        EXPECT_TRUE(out.is_contiguous(cl));
        // fp32: the sum's own rounding; bf16: one rounding of it (within a step of the value).
        const double relative = dtype == torch::kFloat ? 0 : 1.0 / 256;
        EXPECT_LE(
            ((out.to(torch::kFloat) - truth).abs() - truth.abs() * relative).max().item<double>(),
            1e-5);
        auto alone = AddChannelBias(a, {}, bias);
        EXPECT_LE((alone.to(torch::kFloat) - (a.detach().to(torch::kFloat) + per_sample))
                      .abs()
                      .max()
                      .item<double>(),
                  dtype == torch::kFloat ? 1e-5 : 0.07);
        auto dy = torch::randn(dims, o).to(dtype).contiguous(cl);
        auto g = torch::autograd::grad({out}, {a, b, bias}, {dy});
        EXPECT_TRUE(torch::equal(g[0], dy));
        EXPECT_TRUE(torch::equal(g[1], dy));
        auto db = dy.to(torch::kFloat).sum({2, 3}).view({rows, -1, dims[1]}).sum(1);
        EXPECT_LT(RelativeError(g[2], db), 1e-5);
      }
    }
  }
}

TEST_F(FusedOpsGpuTest, GegluMatchesTheCompositionInFp32AndBf16) {
  torch::manual_seed(4);
  // FF inputs of SD1.5 at 16×256² (tokens × 2·inner) and odd widths (scalar path).
  for (const auto& dims : {std::vector<int64_t>{128, 1024, 2560},
                           std::vector<int64_t>{16, 64, 10240}, std::vector<int64_t>{3, 5, 14}}) {
    const auto o = torch::TensorOptions().device(torch::kCUDA);
    auto h32 = torch::randn(dims, o) * 2;
    auto dshape = dims;
    dshape.back() /= 2;
    auto d32 = torch::randn(dshape, o);
    auto composition = [](const torch::Tensor& h) {
      auto parts = h.chunk(2, -1);
      return parts[0] * torch::gelu(parts[1]);
    };
    auto ht = h32.clone().requires_grad_();
    auto ref = composition(ht);
    auto ref_dh = torch::autograd::grad({ref}, {ht}, {d32})[0];
    auto hf = h32.clone().requires_grad_();
    auto out = Geglu(hf);
    auto dh = torch::autograd::grad({out}, {hf}, {d32})[0];
    EXPECT_LT(RelativeError(out, ref), 1e-5) << dims;
    EXPECT_LT(RelativeError(dh, ref_dh), 1e-5) << dims;

    auto hb = h32.to(torch::kBFloat16).requires_grad_();
    auto db = d32.to(torch::kBFloat16);
    auto hbt = hb.detach().to(torch::kFloat).requires_grad_();
    auto truth = composition(hbt);
    auto truth_dh = torch::autograd::grad({truth}, {hbt}, {db.to(torch::kFloat)})[0];
    auto outb = Geglu(hb);
    auto dhb = torch::autograd::grad({outb}, {hb}, {db})[0];
    EXPECT_LT(RelativeError(outb, truth), 8e-3) << dims;
    EXPECT_LT(RelativeError(dhb, truth_dh), 8e-3) << dims;
  }
}

// The motion modules' attention shapes at 16×256² batch 8 (sequences of 16 frames; head dims 40,
// 80, 160: the warp kernel) and odd ones (d = 13: the block kernel), fp32 within 1e-5 and bf16
// within bf16 rounding of the fp32 truth.
TEST_F(FusedOpsGpuTest, ShortAttentionMatchesTheComposition) {
  at::globalContext().setAllowTF32CuBLAS(false);
  torch::manual_seed(6);
  auto composition = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        int64_t heads) {
    auto split = [heads](const torch::Tensor& t) {
      return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
    };
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2) / heads));
    auto p = torch::softmax(torch::matmul(split(q), split(k).transpose(-1, -2)) * scale, -1);
    return torch::matmul(p, split(v)).transpose(1, 2).reshape(q.sizes());
  };
  for (const auto& [n, length, heads, d] :
       {std::array<int64_t, 4>{8192, 16, 8, 40}, std::array<int64_t, 4>{2048, 16, 8, 80},
        std::array<int64_t, 4>{512, 16, 8, 160}, std::array<int64_t, 4>{33, 32, 2, 256},
        std::array<int64_t, 4>{5, 7, 3, 13}, std::array<int64_t, 4>{4, 1, 1, 8},
        // The warp kernel's lane layouts: 3 lanes a row (L = 10), one (L = 24), 6 (L = 5).
        std::array<int64_t, 4>{6, 10, 3, 16}, std::array<int64_t, 4>{7, 24, 2, 32},
        std::array<int64_t, 4>{9, 5, 2, 20}}) {
    const auto o = torch::TensorOptions().device(torch::kCUDA);
    auto q32 = torch::randn({n, length, heads * d}, o), k32 = torch::randn_like(q32),
         v32 = torch::randn_like(q32), d32 = torch::randn_like(q32);
    ASSERT_TRUE(ShortAttentionApplies(q32, heads * d, heads));
    std::vector<torch::Tensor> in32 = {q32.clone().requires_grad_(), k32.clone().requires_grad_(),
                                       v32.clone().requires_grad_()};
    auto ref = composition(in32[0], in32[1], in32[2], heads);
    auto ref_g = torch::autograd::grad({ref}, in32, {d32});
    std::vector<torch::Tensor> f32 = {q32.clone().requires_grad_(), k32.clone().requires_grad_(),
                                      v32.clone().requires_grad_()};
    auto out = FusedShortAttention(f32[0], f32[1], f32[2], heads);
    auto g = torch::autograd::grad({out}, f32, {d32});
    EXPECT_LT(RelativeError(out, ref), 1e-5) << n << " " << length << " " << d;
    // One key (L = 1): the softmax is constant, q and k get no gradient; the kernel's is
    // rounding-small instead of exactly zero.
    auto close = [&](const torch::Tensor& got, const torch::Tensor& want, double tol) {
      if (want.abs().max().item<double>() == 0) {
        return got.abs().max().item<double>() < tol * d32.abs().max().item<double>();
      }
      return RelativeError(got, want) < tol;
    };
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(g[i], ref_g[i], 1e-5)) << i << " " << d;

    // bf16: against the fp32 composition of the same bf16 values.
    std::vector<torch::Tensor> b16, truth_in;
    for (const auto& t : {q32, k32, v32}) {
      b16.push_back(t.to(torch::kBFloat16).requires_grad_());
      truth_in.push_back(b16.back().detach().to(torch::kFloat).requires_grad_());
    }
    auto db = d32.to(torch::kBFloat16);
    auto truth = composition(truth_in[0], truth_in[1], truth_in[2], heads);
    auto truth_g = torch::autograd::grad({truth}, truth_in, {db.to(torch::kFloat)});
    auto outb = FusedShortAttention(b16[0], b16[1], b16[2], heads);
    auto gb = torch::autograd::grad({outb}, b16, {db});
    EXPECT_LT(RelativeError(outb, truth), 8e-3) << d;
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(gb[i], truth_g[i], 1e-2)) << i << " " << d;
  }
}

// A channels-last clip's rows [B, F, H·W, 3 · inner]: each pixel's frames read H·W rows apart
// give what the same sequences gathered as [B·H·W, F, ·] give (tensor-core, warp and block
// kernels), in the clip's layout.
TEST_F(FusedOpsGpuTest, ShortAttentionOnClipRowsIsTheGatheredSequences) {
  torch::manual_seed(12);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const auto& [b, length, p, heads, d] :
       {std::array<int64_t, 5>{2, 16, 256, 8, 40}, std::array<int64_t, 5>{2, 16, 64, 8, 160},
        std::array<int64_t, 5>{3, 7, 5, 3, 13}, std::array<int64_t, 5>{2, 24, 9, 2, 32}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto qkv = torch::randn({b, length, p, 3 * heads * d}, o).to(dtype).requires_grad_();
      auto dout = torch::randn({b, length, p, heads * d}, o).to(dtype);
      ASSERT_TRUE(ShortAttentionApplies(qkv, heads * d, heads));
      auto out = FusedShortSelfAttention(qkv, heads);
      auto g = torch::autograd::grad({out}, {qkv}, {dout})[0];
      auto seq = qkv.detach().permute({0, 2, 1, 3}).reshape({b * p, length, -1}).requires_grad_();
      auto ref = FusedShortSelfAttention(seq, heads);
      auto ref_g = torch::autograd::grad(
          {ref}, {seq}, {dout.permute({0, 2, 1, 3}).reshape({b * p, length, -1})})[0];
      auto back = [&](const torch::Tensor& t) {
        return t.view({b, p, length, t.size(-1)}).permute({0, 2, 1, 3});
      };
      EXPECT_LT(RelativeError(out, back(ref)), 1e-6) << length << " " << d << " " << dtype;
      EXPECT_LT(RelativeError(g, back(ref_g)), 1e-6) << length << " " << d << " " << dtype;
    }
  }
}

// The positions on a clip's rows: LayerNorm with the table's row (r / H·W) mod F added, against
// the composition (fp32 1e-5, bf16 within rounding).
TEST_F(FusedOpsGpuTest, LayerNormAddsPositionsByFrameOnClipRows) {
  torch::manual_seed(13);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const auto& dims :
       {std::vector<int64_t>{8, 16, 1024, 320}, std::vector<int64_t>{2, 5, 7, 16}}) {
    const int64_t f = dims[1], p = dims[2], c = dims[3];
    auto x32 = torch::randn(dims, o) * 2 + 0.5, d32 = torch::randn(dims, o);
    auto w = torch::randn({c}, o), table = torch::randn({f, c}, o);
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto xt = x32.to(dtype).to(torch::kFloat).requires_grad_();
      auto truth = torch::layer_norm(xt, {c}, w, {}, 1e-5) + table.view({1, f, 1, c});
      auto tdx = torch::autograd::grad({truth}, {xt}, {d32.to(dtype).to(torch::kFloat)})[0];
      auto x = x32.to(dtype).requires_grad_();
      auto out = LayerNorm(x, w, {}, 1e-5, table, p);
      auto dx = torch::autograd::grad({out}, {x}, {d32.to(dtype)})[0];
      const double tol = dtype == torch::kFloat ? 1e-5 : 8e-3;
      EXPECT_LT(RelativeError(out, truth), tol) << dims << " " << dtype;
      EXPECT_LT(RelativeError(dx, tdx), tol) << dims << " " << dtype;
    }
  }
}

#if defined(ADCTL_WITH_CUDA)
TEST_F(FusedOpsGpuTest, KernelsFollowTheCurrentStream) {
  // The step's CUDA graph is captured on a side stream: the kernels must run on the current one.
  auto stream = c10::cuda::getStreamFromPool();
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({4, 64, 8, 8}, o);
  torch::Tensor out;
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    out = GroupNormSilu(x, 32, {}, {}, 1e-5);
  }
  stream.synchronize();
  EXPECT_LT(RelativeError(out, torch::silu(torch::group_norm(x, 32, {}, {}, 1e-5))), 1e-5);
}
#endif

// The diffusers fixture UNet (tests/fixtures) in bf16 with the fused kernels, against itself in
// fp32: the prediction and the motion modules' gradients stay within bf16's reach, as close as
// with LibTorch's separate operations.
TEST_F(FusedOpsGpuTest, Bf16UNetWithFusedKernelsFollowsFp32) {
  const std::string fixtures =
      std::string(std::getenv("ADCTL_FIXTURES_DIR") ? std::getenv("ADCTL_FIXTURES_DIR")
                                                    : ADCTL_FIXTURES_DIR) +
      "/diffusers-tiny";
  ModelSources src;
  src.unet2d = fixtures + "/unet2d";
  src.motion_adapter = fixtures + "/motion_adapter";
  auto io = ReadTensorFile(fixtures + "/unet_motion_io.safetensors");
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  auto& t = *io;
  // pred and the motion modules' gradients of one forward/backward in `dtype`.
  auto run = [&](torch::ScalarType dtype, bool fused, bool channels_last = false) {
    SetFusedKernels(fused);
    auto loaded = LoadUNet3D(src, "auto");
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto model = loaded->model;
    model->to(torch::kCUDA, dtype);
    model->set_channels_last(channels_last);
    model->FreezeAllButMotionModules();
    auto pred = model->forward(t["sample"].cuda().to(dtype), t["timesteps"].cuda(),
                               t["encoder_hidden_states"].cuda().to(dtype));
    torch::mse_loss(pred.to(torch::kFloat), t["target"].cuda()).backward();
    std::vector<torch::Tensor> out = {pred.detach().to(torch::kFloat)};
    for (const auto& [name, p] : model->MotionParameters())
      out.push_back(p.grad().to(torch::kFloat));
    return out;
  };
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  const auto fp32 = run(torch::kFloat, false);
  const auto fused = run(torch::kBFloat16, true);
  const auto plain = run(torch::kBFloat16, false);
  // The trainer's configuration on CUDA: channels-last feature maps with the kernels; in fp32
  // it is the contiguous model's arithmetic up to the order of sums.
  const auto rows = run(torch::kBFloat16, true, true);
  const auto rows32 = run(torch::kFloat, true, true);
  SetFusedKernels(true);
  ASSERT_EQ(rows32.size(), fp32.size());
  for (size_t i = 0; i < fp32.size(); ++i) {
    if (fp32[i].norm().item<double>() == 0) continue;
    EXPECT_LT(RelativeError(rows32[i], fp32[i]), 1e-4) << "channels-last fp32, tensor " << i;
  }

  ASSERT_EQ(fused.size(), fp32.size());
  const double pred_fused = RelativeError(fused[0], fp32[0]);
  const double pred_plain = RelativeError(plain[0], fp32[0]);
  EXPECT_LT(pred_fused, 2e-2);
  EXPECT_LT(pred_fused, 1.5 * pred_plain + 1e-3)
      << "fused " << pred_fused << " plain " << pred_plain;
  const double pred_rows = RelativeError(rows[0], fp32[0]);
  EXPECT_LT(pred_rows, 1.5 * pred_plain + 1e-3) << "channels-last " << pred_rows;
  double worst_fused = 0, worst_plain = 0;
  for (size_t i = 1; i < fp32.size(); ++i) {
    if (fp32[i].norm().item<double>() == 0) continue;
    worst_fused = std::max(worst_fused, RelativeError(fused[i], fp32[i]));
    worst_plain = std::max(worst_plain, RelativeError(plain[i], fp32[i]));
  }
  EXPECT_LT(worst_fused, 1.5 * worst_plain + 1e-2)
      << "fused " << worst_fused << " plain " << worst_plain;
  double worst_rows = 0;
  for (size_t i = 1; i < fp32.size(); ++i) {
    if (fp32[i].norm().item<double>() == 0) continue;
    worst_rows = std::max(worst_rows, RelativeError(rows[i], fp32[i]));
  }
  EXPECT_LT(worst_rows, 1.5 * worst_plain + 1e-2)
      << "channels-last " << worst_rows << " plain " << worst_plain;
}

}  // namespace
}  // namespace adctl

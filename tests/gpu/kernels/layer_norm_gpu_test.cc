// The LayerNorm kernels (worker/kernels/layer_norm.cu) against LibTorch's composition on the same
// GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of the fp32
// result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/layer_norm.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

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

}  // namespace
}  // namespace adctl

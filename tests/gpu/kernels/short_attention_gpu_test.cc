// The short-attention kernels (worker/kernels/short_attention.cu) against LibTorch's composition on
// the same GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of
// the fp32 result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/short_attention.h"
#include "worker/kernels/short_attention_internal.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

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

}  // namespace
}  // namespace adctl

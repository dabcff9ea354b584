// Short attention's formulas on the CPU (worker/kernels/short_attention.h): the reference math the
// CUDA kernels implement (tests/gpu/kernels/short_attention_gpu_test.cc compares them) must give
// the values and gradients of LibTorch's composition under autograd.
#include "worker/kernels/short_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <vector>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/short_attention_internal.h"

namespace adctl {
namespace {

using kernel_test::MaxRelative;

// softmax(q kᵀ/√d) v per head, written as attention layers do: projections [N, L, H·d] split
// into heads.
torch::Tensor AttentionComposition(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, int64_t heads) {
  auto split = [heads](const torch::Tensor& t) {
    return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2) / heads));
  auto p = torch::softmax(torch::matmul(split(q), split(k).transpose(-1, -2)) * scale, -1);
  auto o = torch::matmul(p, split(v));
  return o.transpose(1, 2).reshape({q.size(0), q.size(1), q.size(2)});
}

TEST(FusedShortAttention, ValuesAndGradientsAreTheComposition) {
  torch::manual_seed(5);
  for (const auto& [n, length, heads, d] :
       {std::array<int64_t, 4>{6, 16, 2, 5}, std::array<int64_t, 4>{3, 7, 3, 4},
        std::array<int64_t, 4>{2, 1, 1, 8}}) {
    auto make = [&] {
      return (torch::randn({n, length, heads * d}, torch::kDouble) * 2).requires_grad_();
    };
    auto q = make(), k = make(), v = make();
    auto dout = torch::randn({n, length, heads * d}, torch::kDouble);
    auto ref = AttentionComposition(q, k, v, heads);
    auto ref_grads = torch::autograd::grad({ref}, {q, k, v}, {dout});
    auto out = FusedShortAttention(q, k, v, heads);
    auto grads = torch::autograd::grad({out}, {q, k, v}, {dout});
    EXPECT_LT(MaxRelative(out, ref), 1e-12) << length;
    for (int i = 0; i < 3; ++i) EXPECT_LT(MaxRelative(grads[i], ref_grads[i]), 1e-10) << i;
  }
}

// A channels-last clip's rows [B, L, P, 3 · inner]: the B·P sequences over L, P rows apart,
// give what the same sequences gathered as [B·P, L, ·] give, in the clip's layout.
TEST(FusedShortAttention, ClipRowsAreTheInterleavedSequences) {
  torch::manual_seed(15);
  const int64_t b = 2, length = 5, p = 3, heads = 2, d = 4;
  auto qkv = torch::randn({b, length, p, 3 * heads * d}, torch::kDouble).requires_grad_();
  auto dout = torch::randn({b, length, p, heads * d}, torch::kDouble);
  auto out = FusedShortSelfAttention(qkv, heads);
  ASSERT_EQ(out.sizes(), dout.sizes());
  auto grad = torch::autograd::grad({out}, {qkv}, {dout})[0];
  auto seq = qkv.permute({0, 2, 1, 3}).reshape({b * p, length, -1});
  auto parts = seq.chunk(3, -1);
  auto ref = AttentionComposition(parts[0], parts[1], parts[2], heads)
                 .view({b, p, length, heads * d})
                 .permute({0, 2, 1, 3});
  auto ref_grad = torch::autograd::grad({ref}, {qkv}, {dout})[0];
  EXPECT_LT(MaxRelative(out, ref), 1e-12);
  EXPECT_LT(MaxRelative(grad, ref_grad), 1e-10);
}

TEST(FusedShortAttention, LogSumExpIsPerSequenceHeadAndQuery) {
  // One head, keys equal: every score is the same, so lse = score + log L.
  auto q = torch::ones({1, 4, 2}, torch::kDouble), k = torch::ones({1, 4, 2}, torch::kDouble);
  auto r = fused_reference::ShortAttentionForward(q, k, torch::randn({1, 4, 2}, torch::kDouble), 1);
  ASSERT_EQ(r.lse.sizes(), (std::vector<int64_t>{1, 4}));
  EXPECT_NEAR(r.lse[0][2].item<double>(), 2 / std::sqrt(2.0) + std::log(4.0), 1e-12);
}

}  // namespace
}  // namespace adctl

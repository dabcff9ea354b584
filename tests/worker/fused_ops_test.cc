// The fused operations' formulas (worker/kernels/fused_ops.h) on the CPU: the reference math the
// CUDA kernels implement (tests/gpu/fused_ops_gpu_test.cc compares them) must give the values and
// gradients of LibTorch's composition under autograd.
#include "worker/kernels/fused_ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>

namespace adctl {
namespace {

double MaxRelative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

struct GroupNormCase {
  std::vector<int64_t> shape;
  int64_t groups;
  bool affine;
};

class FusedGroupNormSiluTest : public ::testing::TestWithParam<GroupNormCase> {};

TEST_P(FusedGroupNormSiluTest, ValuesAndGradientsAreTheComposition) {
  torch::manual_seed(7);
  const auto& p = GetParam();
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  // Shifted and scaled so the variance is not 1 and the mean not 0.
  auto x = (torch::randn(p.shape, opts) * 3 + 1.5).requires_grad_();
  torch::Tensor w, b;
  if (p.affine) {
    w = torch::randn({p.shape[1]}, opts).requires_grad_();
    b = torch::randn({p.shape[1]}, opts).requires_grad_();
  }
  auto dy = torch::randn(p.shape, opts);

  const auto inputs =
      p.affine ? std::vector<torch::Tensor>{x, w, b} : std::vector<torch::Tensor>{x};
  for (const bool silu : {true, false}) {  // the ResNets' GroupNorm+SiLU, the transformers' norm
    auto ref = torch::group_norm(x, p.groups, w, b, 1e-5);
    if (silu) ref = torch::silu(ref);
    auto ref_grads = torch::autograd::grad({ref}, inputs, {dy});
    auto out = silu ? FusedGroupNormSilu(x, p.groups, w, b, 1e-5)
                    : FusedGroupNorm(x, p.groups, w, b, 1e-5, /*silu=*/false);
    auto grads = torch::autograd::grad({out}, inputs, {dy});
    EXPECT_LT(MaxRelative(out, ref), 1e-12) << silu;
    EXPECT_LT(MaxRelative(grads[0], ref_grads[0]), 1e-10) << "dx " << silu;
    if (p.affine) {
      EXPECT_LT(MaxRelative(grads[1], ref_grads[1]), 1e-10) << "dweight " << silu;
      EXPECT_LT(MaxRelative(grads[2], ref_grads[2]), 1e-10) << "dbias " << silu;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedGroupNormSiluTest,
                         ::testing::Values(GroupNormCase{{2, 8, 4, 4}, 4, true},
                                           GroupNormCase{{3, 6, 5, 3}, 3, false},
                                           GroupNormCase{{2, 12, 7}, 2, true},
                                           GroupNormCase{{2, 8, 1, 1}, 2, true}));

// Channels-last input (a UNet feature map on CUDA, a motion module's 5-D clip view) keeps its
// layout through the fused GroupNorm, values and gradients those of the composition.
TEST(FusedGroupNormSilu, ChannelsLastInputKeepsItsLayout) {
  torch::manual_seed(17);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto base = torch::randn({6, 8, 3, 5}, opts).contiguous(at::MemoryFormat::ChannelsLast) * 2 + 1;
  auto w = torch::randn({8}, opts).requires_grad_(), b = torch::randn({8}, opts).requires_grad_();
  for (const bool clip : {false, true}) {
    auto x = (clip ? base.view({2, 3, 8, 3, 5}).permute({0, 2, 1, 3, 4}) : base).detach();
    x.requires_grad_();
    ASSERT_TRUE(IsChannelsLast(x));
    auto dy = torch::randn(x.sizes(), opts);
    auto ref = torch::silu(torch::group_norm(x.contiguous(), 4, w, b, 1e-5));
    auto ref_grads = torch::autograd::grad({ref}, {x, w, b}, {dy});
    auto out = FusedGroupNormSilu(x, 4, w, b, 1e-5);
    EXPECT_TRUE(IsChannelsLast(out)) << clip;
    auto grads = torch::autograd::grad({out}, {x, w, b}, {dy});
    EXPECT_LT(MaxRelative(out, ref), 1e-12) << clip;
    for (int i = 0; i < 3; ++i) EXPECT_LT(MaxRelative(grads[i], ref_grads[i]), 1e-10) << i;
  }
  EXPECT_FALSE(IsChannelsLast(torch::randn({2, 8, 3, 5})));
}

// x + f(GroupNorm(x)) on the pass-through output: x's gradient sums both uses', in either
// layout.
TEST(FusedGroupNormSilu, ResidualPassThroughCarriesItsGradient) {
  torch::manual_seed(18);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  for (const bool channels_last : {false, true}) {
    auto x = torch::randn({2, 8, 3, 5}, opts) + 0.5;
    if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    x.requires_grad_();
    auto w = torch::randn({8}, opts);
    auto dy = torch::randn({2, 8, 3, 5}, opts), dr = torch::randn({2, 8, 3, 5}, opts);
    auto ref = torch::silu(torch::group_norm(x, 4, w, {}, 1e-5));
    auto ref_dx = torch::autograd::grad({ref}, {x}, {dy})[0] + dr;
    auto [y, r] = FusedGroupNormResidual(x, 4, w, {}, 1e-5, /*silu=*/true);
    EXPECT_TRUE(torch::equal(r, x));
    auto dx = torch::autograd::grad({y, r * 1}, {x}, {dy, dr})[0];
    EXPECT_LT(MaxRelative(y, ref), 1e-12) << channels_last;
    EXPECT_LT(MaxRelative(dx, ref_dx), 1e-10) << channels_last;
  }
}

TEST(FusedGroupNormSilu, StatisticsAreTheGroupsMeanAndInverseDeviation) {
  auto x = torch::tensor({1.0f, 3.0f, 5.0f, 7.0f, 2.0f, 2.0f, 2.0f, 6.0f}).view({1, 4, 2});
  auto r = fused_reference::GroupNormSiluForward(x, 2, {}, {}, 0.0);
  // Group 0: 1, 3, 5, 7 → mean 4, var 5; group 1: 2, 2, 2, 6 → mean 3, var 3.
  EXPECT_NEAR(r.mean[0][0].item<double>(), 4.0, 1e-6);
  EXPECT_NEAR(r.mean[0][1].item<double>(), 3.0, 1e-6);
  EXPECT_NEAR(r.rstd[0][0].item<double>(), 1 / std::sqrt(5.0), 1e-6);
  EXPECT_NEAR(r.rstd[0][1].item<double>(), 1 / std::sqrt(3.0), 1e-6);
  EXPECT_EQ(r.mean.scalar_type(), torch::kFloat);
}

TEST(FusedGroupNormSilu, NamesChannelsThatDoNotSplitIntoGroups) {
  auto x = torch::randn({1, 6, 2, 2});
  try {
    FusedGroupNormSilu(x, 4, {}, {}, 1e-5);
    FAIL() << "6 channels in 4 groups accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 channels do not split into 4 groups"),
              std::string::npos)
        << e.what();
  }
}

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

// A ResNet's sums: the time embedding, one row a clip, over its frames' maps; conv2's bias with
// the residual. Values and all three gradients are the composition's, channels-last or not.
TEST(FusedAddChannelBias, ValuesAndGradientsAreTheComposition) {
  torch::manual_seed(12);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  for (const bool channels_last : {false, true}) {
    for (const int64_t rows : {1, 2}) {
      SCOPED_TRACE((channels_last ? "channels-last, " : "contiguous, ") + std::to_string(rows) +
                   " bias rows");
      auto a = torch::randn({6, 4, 3, 5}, opts);
      if (channels_last) a = a.contiguous(torch::MemoryFormat::ChannelsLast);
      a.requires_grad_();
      auto b = torch::randn_like(a).requires_grad_();
      auto bias = torch::randn({rows, 4}, opts).requires_grad_();
      auto ds = torch::randn({6, 4, 3, 5}, opts);
      auto ref = a + b + bias.repeat_interleave(6 / rows, 0).view({6, 4, 1, 1});
      auto ref_g = torch::autograd::grad({ref}, {a, b, bias}, {ds});
      auto out = FusedAddChannelBias(a, b, bias);
      EXPECT_TRUE(torch::allclose(out, ref));
      auto g = torch::autograd::grad({out}, {a, b, bias}, {ds});
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(g[i], ref_g[i])) << "input " << i;
      // Without b, and through the dispatcher (the composition on the CPU).
      auto one = torch::autograd::grad({AddChannelBias(a, {}, bias)}, {a, bias}, {ds});
      auto one_ref = torch::autograd::grad(
          {a + bias.repeat_interleave(6 / rows, 0).view({6, 4, 1, 1})}, {a, bias}, {ds});
      EXPECT_TRUE(torch::allclose(one[0], one_ref[0]));
      EXPECT_TRUE(torch::allclose(one[1], one_ref[1]));
    }
  }
}

TEST(FusedAddChannelBias, NamesABiasThatDoesNotFitTheMap) {
  try {
    FusedAddChannelBias(torch::zeros({6, 4, 3, 5}), {}, torch::zeros({4, 4}));
    FAIL() << "4 bias rows for 6 samples accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not [C] or [R, C] with R dividing N"),
              std::string::npos)
        << e.what();
  }
}

// The motion modules' norm: LayerNorm, then the position table added to each sequence's rows.
TEST(FusedLayerNorm, ValuesAndGradientsAreTheComposition) {
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  for (const bool with_table : {false, true}) {
    auto x = (torch::randn({3, 4, 12}, opts) * 2 - 0.7).requires_grad_();
    auto w = torch::randn({12}, opts).requires_grad_();
    auto b = torch::randn({12}, opts).requires_grad_();
    auto table = torch::randn({4, 12}, opts).requires_grad_();
    auto dy = torch::randn({3, 4, 12}, opts);
    auto ref = torch::layer_norm(x, {12}, w, b, 1e-5);
    if (with_table) ref = ref + table;
    std::vector<torch::Tensor> inputs = {x, w, b};
    if (with_table) inputs.push_back(table);
    auto ref_grads = torch::autograd::grad({ref}, inputs, {dy});
    auto out = FusedLayerNorm(x, w, b, 1e-5, with_table ? table : torch::Tensor());
    auto grads = torch::autograd::grad({out}, inputs, {dy});
    EXPECT_LT(MaxRelative(out, ref), 1e-12) << with_table;
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_LT(MaxRelative(grads[i], ref_grads[i]), 1e-10) << "input " << i << " " << with_table;
    }
  }
}

// A residual block x + f(LayerNorm(x)) on the pass-through output: x's gradient is the sum of
// both uses', computed in the norm's backward.
// The positions on a channels-last clip's rows [B, F, P, C]: row r takes the table's row
// (r / P) mod F (repeat P), and the table's gradient sums its rows' uses.
TEST(FusedLayerNorm, RepeatAddsEachTableRowToConsecutiveRows) {
  torch::manual_seed(16);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto x = (torch::randn({2, 4, 3, 10}, opts) - 0.3).requires_grad_();
  auto w = torch::randn({10}, opts).requires_grad_();
  auto table = torch::randn({4, 10}, opts).requires_grad_();
  auto dy = torch::randn({2, 4, 3, 10}, opts);
  auto ref = torch::layer_norm(x, {10}, w, {}, 1e-5) + table.view({1, 4, 1, 10});
  auto ref_grads = torch::autograd::grad({ref}, {x, w, table}, {dy});
  for (const bool fused : {true, false}) {
    auto out =
        fused ? FusedLayerNorm(x, w, {}, 1e-5, table, 3) : LayerNorm(x, w, {}, 1e-5, table, 3);
    auto grads = torch::autograd::grad({out}, {x, w, table}, {dy});
    EXPECT_LT(MaxRelative(out, ref), 1e-12) << fused;
    for (int i = 0; i < 3; ++i) EXPECT_LT(MaxRelative(grads[i], ref_grads[i]), 1e-10) << i;
  }
}

TEST(FusedLayerNorm, ResidualPassThroughCarriesItsGradient) {
  torch::manual_seed(8);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto x = (torch::randn({2, 4, 10}, opts) + 1).requires_grad_();
  auto w = torch::randn({10}, opts).requires_grad_();
  auto m = torch::randn({10, 10}, opts);
  auto dy = torch::randn({2, 4, 10}, opts);
  auto ref = torch::layer_norm(x, {10}, w, {}, 1e-5).matmul(m).tanh() + x;
  auto ref_grads = torch::autograd::grad({ref}, {x, w}, {dy});
  auto [h, r] = FusedLayerNormResidual(x, w, {}, 1e-5);
  EXPECT_TRUE(torch::equal(r, x));
  auto out = h.matmul(m).tanh() + r;
  auto grads = torch::autograd::grad({out}, {x, w}, {dy});
  EXPECT_LT(MaxRelative(out, ref), 1e-12);
  EXPECT_LT(MaxRelative(grads[0], ref_grads[0]), 1e-10);
  EXPECT_LT(MaxRelative(grads[1], ref_grads[1]), 1e-10);
  // The pass-through unused: the norm's gradient alone.
  auto only = torch::autograd::grad({FusedLayerNormResidual(x, w, {}, 1e-5).first}, {x}, {dy})[0];
  auto ref_only = torch::autograd::grad({torch::layer_norm(x, {10}, w, {}, 1e-5)}, {x}, {dy})[0];
  EXPECT_LT(MaxRelative(only, ref_only), 1e-10);
}

TEST(FusedLayerNorm, WithoutAffineAndInFloat32) {
  torch::manual_seed(6);
  auto x = (torch::randn({5, 40}) * 4 + 3).requires_grad_();
  auto dy = torch::randn({5, 40});
  auto ref = torch::layer_norm(x, {40}, {}, {}, 1e-6);
  auto ref_dx = torch::autograd::grad({ref}, {x}, {dy})[0];
  auto out = FusedLayerNorm(x, {}, {}, 1e-6);
  auto dx = torch::autograd::grad({out}, {x}, {dy})[0];
  EXPECT_LT(MaxRelative(out, ref), 1e-6);
  EXPECT_LT(MaxRelative(dx, ref_dx), 1e-5);
  // Statistics per row: mean and 1/σ.
  auto r = fused_reference::LayerNormForward(torch::tensor({1.0f, 3.0f, 5.0f, 7.0f}).view({1, 4}),
                                             {}, {}, 0.0);
  EXPECT_NEAR(r.mean[0].item<double>(), 4.0, 1e-6);
  EXPECT_NEAR(r.rstd[0].item<double>(), 1 / std::sqrt(5.0), 1e-6);
}

TEST(FusedLayerNorm, NamesTablesThatDoNotFitTheRows) {
  auto x = torch::randn({2, 5, 8});
  try {
    FusedLayerNorm(x, {}, {}, 1e-5, torch::randn({3, 8}));
    FAIL() << "a 3-row table over 10 rows accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be [P, 8] with P dividing the 10 rows"),
              std::string::npos)
        << e.what();
  }
  try {
    FusedLayerNorm(x, torch::ones({6}), {}, 1e-5);
    FAIL() << "a 6-element weight over 8 channels accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight has 6 elements for 8 channels"), std::string::npos)
        << e.what();
  }
}

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

TEST(FusedOps, CpuTensorsTakeLibTorchsComposition) {
  // The switch only matters for CUDA tensors: on the CPU the layers run the plain operations.
  auto x = torch::randn({2, 8, 3, 3});
  auto ref = torch::silu(torch::group_norm(x, 4, {}, {}, 1e-6));
  SetFusedKernels(true);
  EXPECT_TRUE(torch::equal(GroupNormSilu(x, 4, {}, {}, 1e-6), ref));
  auto h = torch::randn({3, 10});
  auto parts = h.chunk(2, -1);
  EXPECT_TRUE(torch::equal(Geglu(h), parts[0] * torch::gelu(parts[1])));
  auto q = torch::randn({2, 16, 8});
  EXPECT_FALSE(ShortAttentionApplies(q, 8, 2));
  EXPECT_TRUE(
      torch::equal(GroupNormPlain(x, 4, {}, {}, 1e-6), torch::group_norm(x, 4, {}, {}, 1e-6)));
  auto t = torch::randn({2, 3, 4});
  EXPECT_TRUE(torch::equal(TransposeTokens(t), t.transpose(1, 2).contiguous()));
  auto y = torch::randn({2, 4, 3});
  EXPECT_TRUE(torch::equal(AddTransposed(t, y), t + y.transpose(1, 2)));
  auto tokens = torch::randn({3, 4, 6});
  auto w = torch::randn({6}), table = torch::randn({4, 6});
  EXPECT_TRUE(torch::equal(LayerNorm(tokens, w, {}, 1e-5, table),
                           torch::layer_norm(tokens, {6}, w, {}, 1e-5) + table));
}

}  // namespace
}  // namespace adctl

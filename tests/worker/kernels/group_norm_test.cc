// GroupNorm (+ SiLU)'s formulas on the CPU (worker/kernels/group_norm.h): the reference math the
// CUDA kernels implement (tests/gpu/kernels/group_norm_gpu_test.cc compares them) must give the
// values and gradients of LibTorch's composition under autograd.
#include "worker/kernels/group_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/dispatch.h"
#include "worker/kernels/group_norm_internal.h"

namespace adctl {
namespace {

using kernel_test::MaxRelative;

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

}  // namespace
}  // namespace adctl

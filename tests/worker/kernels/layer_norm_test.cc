// LayerNorm's formulas on the CPU (worker/kernels/layer_norm.h): the reference math the CUDA
// kernels implement (tests/gpu/kernels/layer_norm_gpu_test.cc compares them) must give the values
// and gradients of LibTorch's composition under autograd.
#include "worker/kernels/layer_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/layer_norm_internal.h"

namespace adctl {
namespace {

using kernel_test::MaxRelative;

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

}  // namespace
}  // namespace adctl

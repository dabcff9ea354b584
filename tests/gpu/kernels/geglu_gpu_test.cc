// The GEGLU kernels (worker/kernels/geglu.cu) against LibTorch's composition on the same GPU (label
// gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of the fp32 result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/geglu.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

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

}  // namespace
}  // namespace adctl

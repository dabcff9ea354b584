// The channel-bias kernel (worker/kernels/channel_bias.cu) against LibTorch's composition on the
// same GPU (label gpu; skipped without one): fp32 within 1e-5, bf16 within bf16's rounding of the
// fp32 result.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/channel_bias.h"

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

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

}  // namespace
}  // namespace adctl

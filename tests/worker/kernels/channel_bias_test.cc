// The channel-bias sums on the CPU (worker/kernels/channel_bias.h): the reference math the CUDA
// kernels implement (tests/gpu/kernels/channel_bias_gpu_test.cc compares them) must give the values
// and gradients of LibTorch's composition under autograd.
#include "worker/kernels/channel_bias.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/channel_bias_internal.h"

namespace adctl {
namespace {

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

}  // namespace
}  // namespace adctl

// The fused kernels' switch on the CPU (worker/kernels/dispatch.h): the layers' dispatchers take
// LibTorch's composition for CPU tensors whatever the switch says.
#include "worker/kernels/dispatch.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/worker/kernels/kernel_test.h"
#include "worker/kernels/geglu.h"
#include "worker/kernels/group_norm.h"
#include "worker/kernels/layer_norm.h"
#include "worker/kernels/short_attention.h"
#include "worker/kernels/token_transpose.h"

namespace adctl {
namespace {

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

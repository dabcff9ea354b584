// The fused kernels together (worker/kernels/) on the GPU (label gpu; skipped without one): they
// run on the current stream, and the diffusers fixture UNet in bf16 with them follows itself in
// fp32.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/gpu/kernels/kernel_gpu_test.h"
#include "worker/kernels/dispatch.h"
#include "worker/kernels/group_norm.h"
#include "worker/model/weights.h"

#if defined(ADCTL_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace adctl {
namespace {

using kernel_test::FusedOpsGpuTest;
using kernel_test::RelativeError;

#if defined(ADCTL_WITH_CUDA)
TEST_F(FusedOpsGpuTest, KernelsFollowTheCurrentStream) {
  // The step's CUDA graph is captured on a side stream: the kernels must run on the current one.
  auto stream = c10::cuda::getStreamFromPool();
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({4, 64, 8, 8}, o);
  torch::Tensor out;
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    out = GroupNormSilu(x, 32, {}, {}, 1e-5);
  }
  stream.synchronize();
  EXPECT_LT(RelativeError(out, torch::silu(torch::group_norm(x, 32, {}, {}, 1e-5))), 1e-5);
}
#endif

// The diffusers fixture UNet (tests/fixtures) in bf16 with the fused kernels, against itself in
// fp32: the prediction and the motion modules' gradients stay within bf16's reach, as close as
// with LibTorch's separate operations.
TEST_F(FusedOpsGpuTest, Bf16UNetWithFusedKernelsFollowsFp32) {
  const std::string fixtures =
      std::string(std::getenv("ADCTL_FIXTURES_DIR") ? std::getenv("ADCTL_FIXTURES_DIR")
                                                    : ADCTL_FIXTURES_DIR) +
      "/diffusers-tiny";
  ModelSources src;
  src.unet2d = fixtures + "/unet2d";
  src.motion_adapter = fixtures + "/motion_adapter";
  auto io = ReadTensorFile(fixtures + "/unet_motion_io.safetensors");
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  auto& t = *io;
  // pred and the motion modules' gradients of one forward/backward in `dtype`.
  auto run = [&](torch::ScalarType dtype, bool fused, bool channels_last = false) {
    SetFusedKernels(fused);
    auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto model = loaded->model;
    model->to(torch::kCUDA, dtype);
    model->set_channels_last(channels_last);
    model->FreezeAllButMotionModules();
    auto pred = model->forward(t["sample"].cuda().to(dtype), t["timesteps"].cuda(),
                               t["encoder_hidden_states"].cuda().to(dtype));
    torch::mse_loss(pred.to(torch::kFloat), t["target"].cuda()).backward();
    std::vector<torch::Tensor> out = {pred.detach().to(torch::kFloat)};
    for (const auto& [name, p] : model->MotionParameters())
      out.push_back(p.grad().to(torch::kFloat));
    return out;
  };
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  const auto fp32 = run(torch::kFloat, false);
  const auto fused = run(torch::kBFloat16, true);
  const auto plain = run(torch::kBFloat16, false);
  // The trainer's configuration on CUDA: channels-last feature maps with the kernels; in fp32
  // it is the contiguous model's arithmetic up to the order of sums.
  const auto rows = run(torch::kBFloat16, true, true);
  const auto rows32 = run(torch::kFloat, true, true);
  SetFusedKernels(true);
  ASSERT_EQ(rows32.size(), fp32.size());
  for (size_t i = 0; i < fp32.size(); ++i) {
    if (fp32[i].norm().item<double>() == 0) continue;
    EXPECT_LT(RelativeError(rows32[i], fp32[i]), 1e-4) << "channels-last fp32, tensor " << i;
  }

  ASSERT_EQ(fused.size(), fp32.size());
  const double pred_fused = RelativeError(fused[0], fp32[0]);
  const double pred_plain = RelativeError(plain[0], fp32[0]);
  EXPECT_LT(pred_fused, 2e-2);
  EXPECT_LT(pred_fused, 1.5 * pred_plain + 1e-3)
      << "fused " << pred_fused << " plain " << pred_plain;
  const double pred_rows = RelativeError(rows[0], fp32[0]);
  EXPECT_LT(pred_rows, 1.5 * pred_plain + 1e-3) << "channels-last " << pred_rows;
  double worst_fused = 0, worst_plain = 0;
  for (size_t i = 1; i < fp32.size(); ++i) {
    if (fp32[i].norm().item<double>() == 0) continue;
    worst_fused = std::max(worst_fused, RelativeError(fused[i], fp32[i]));
    worst_plain = std::max(worst_plain, RelativeError(plain[i], fp32[i]));
  }
  EXPECT_LT(worst_fused, 1.5 * worst_plain + 1e-2)
      << "fused " << worst_fused << " plain " << worst_plain;
  double worst_rows = 0;
  for (size_t i = 1; i < fp32.size(); ++i) {
    if (fp32[i].norm().item<double>() == 0) continue;
    worst_rows = std::max(worst_rows, RelativeError(rows[i], fp32[i]));
  }
  EXPECT_LT(worst_rows, 1.5 * worst_plain + 1e-2)
      << "channels-last " << worst_rows << " plain " << worst_plain;
}

}  // namespace
}  // namespace adctl

// LayerNorm over the last dimension (layer_norm.cu's one-warp-a-row kernels on CUDA tensors while
// the fused kernels are on).
#pragma once

#include <torch/torch.h>

#include <utility>

namespace adctl {

// LayerNorm over the last dimension with [C] weight and bias (either may be undefined, in any
// float type), + `add` where given: add is [P, C] (or [1, P, C]) and row r of x, seen as
// [rows, C], gets add's row r mod P — the motion modules' sinusoidal positions on [N, F, C]
// tokens (P = F), added in the same pass (diffusers adds them after the norm). With repeat R,
// row r gets add's row (r / R) mod P: the positions on a channels-last clip's [B, F, H·W, C]
// rows (P = F, R = H·W). One warp per row
// on CUDA (LayerNorm's own kernels spend a block on a row and run far below the memory rate on
// the UNet's 320 … 1280 channels); the backward gives γ and β their gradients in the same pass
// when they train.
torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps, const torch::Tensor& add = {},
                        int64_t repeat = 1);

// {LayerNorm(x, …) (+ add), x} for a residual block x + f(LayerNorm(x)): use the second for the
// residual, and the kernels' backward adds its gradient to the norm's in the same pass (where
// autograd would sum x's two gradients with a separate kernel). Off CUDA: {LayerNorm(…), x}.
std::pair<torch::Tensor, torch::Tensor> LayerNormResidual(const torch::Tensor& x,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          const torch::Tensor& add = {},
                                                          int64_t repeat = 1);

}  // namespace adctl

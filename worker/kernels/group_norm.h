// GroupNorm (+ SiLU) on [N, C, ...] maps, NCHW or channels-last (group_norm.cu's kernels on CUDA
// tensors while the fused kernels are on: one read of x for the statistics and one pass for the
// output; the backward keeps x and two numbers per group, not GroupNorm's output).
#pragma once

#include <torch/torch.h>

#include <utility>

namespace adctl {

// SiLU(GroupNorm(x)); x is [N, C, ...] with C divisible by `groups`; weight and bias [C] or
// undefined.
torch::Tensor GroupNormSilu(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps);
// GroupNorm(x) with its affine and no activation (the transformers' and motion modules' norm):
// the same kernels as GroupNormSilu's, without the SiLU.
torch::Tensor GroupNormPlain(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps);

// {GroupNorm(x) (+ SiLU where silu), x} for an x used again beside its norm (a residual add, a
// shortcut convolution): use the second for that use, and the channels-last kernels' backward
// adds its gradient to the norm's in their pass (where autograd would sum x's two gradients with
// a kernel of its own). Off the kernels: {the composition, x}.
std::pair<torch::Tensor, torch::Tensor> GroupNormResidual(const torch::Tensor& x, int64_t groups,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          bool silu);

}  // namespace adctl

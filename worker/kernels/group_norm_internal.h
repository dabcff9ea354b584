// What group_norm.cc keeps for the tests (tests/worker/kernels/group_norm_test.cc,
// tests/gpu/kernels/): the fused autograd functions called directly, and the reference math that
// the CPU tests compare with autograd's gradient of the composition and the GPU tests compare the
// kernels with.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace adctl {

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (The dispatchers of group_norm.h pick between
// these and the plain composition.)
torch::Tensor FusedGroupNorm(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, bool silu);
std::pair<torch::Tensor, torch::Tensor> FusedGroupNormResidual(const torch::Tensor& x,
                                                               int64_t groups,
                                                               const torch::Tensor& weight,
                                                               const torch::Tensor& bias,
                                                               double eps, bool silu);
torch::Tensor FusedGroupNormSilu(const torch::Tensor& x, int64_t groups,
                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps);

namespace fused_reference {

// The kernels' formulas in LibTorch operations, computed in fp32 (fp64 for fp64 inputs) and
// returned in the input's dtype. `silu` false: GroupNorm alone.
struct GroupNormSiluResult {
  torch::Tensor y;     // x's shape and dtype
  torch::Tensor mean;  // [N, groups], fp32 (fp64 for fp64 inputs)
  torch::Tensor rstd;  // [N, groups], likewise: 1 / sqrt(var + eps), var the biased variance
};
GroupNormSiluResult GroupNormSiluForward(const torch::Tensor& x, int64_t groups,
                                         const torch::Tensor& weight, const torch::Tensor& bias,
                                         double eps, bool silu = true);
// x's gradient from y's (dy), given the forward's statistics.
torch::Tensor GroupNormSiluBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                    const torch::Tensor& mean, const torch::Tensor& rstd,
                                    const torch::Tensor& weight, const torch::Tensor& bias,
                                    int64_t groups, bool silu = true);
// The weight's and bias's gradients ([C] each, in the compute type), for when they train.
std::pair<torch::Tensor, torch::Tensor> GroupNormSiluAffineBackward(
    const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
    const torch::Tensor& rstd, const torch::Tensor& weight, const torch::Tensor& bias,
    int64_t groups, bool silu = true);

}  // namespace fused_reference
}  // namespace adctl

// What layer_norm.cc keeps for the tests (tests/worker/kernels/layer_norm_test.cc,
// tests/gpu/kernels/): the fused autograd functions called directly, and the reference math that
// the CPU tests compare with autograd's gradient of the composition and the GPU tests compare the
// kernels with.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace adctl {

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (The dispatchers of layer_norm.h pick between
// these and the plain composition.)
std::pair<torch::Tensor, torch::Tensor> FusedLayerNormResidual(
    const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
    const torch::Tensor& add = {}, int64_t repeat = 1);
torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, const torch::Tensor& add = {},
                             int64_t repeat = 1);

namespace fused_reference {

// LayerNorm over the last dimension (+ add, [P, C] periodic over the rows, each row of add
// `repeat` consecutive rows, or undefined / empty);
// mean and rstd are [rows] in the compute type.
struct LayerNormResult {
  torch::Tensor y, mean, rstd;
};
LayerNormResult LayerNormForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps,
                                 const torch::Tensor& add = {}, int64_t repeat = 1);
torch::Tensor LayerNormBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                const torch::Tensor& mean, const torch::Tensor& rstd,
                                const torch::Tensor& weight);
// γ's and β's gradients: [Σ dy · x̂, Σ dy] over the rows, in the compute type.
std::pair<torch::Tensor, torch::Tensor> LayerNormAffineBackward(const torch::Tensor& dy,
                                                                const torch::Tensor& x,
                                                                const torch::Tensor& mean,
                                                                const torch::Tensor& rstd);

}  // namespace fused_reference
}  // namespace adctl

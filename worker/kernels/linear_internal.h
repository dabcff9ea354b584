// What linear.cc keeps for the tests (tests/worker/kernels/linear_test.cc, tests/gpu/kernels/):
// the fused autograd function called directly (its CPU side is LibTorch's sums).
#pragma once

#include <torch/torch.h>

namespace adctl {

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (The dispatchers of linear.h pick between
// these and the plain composition.)
torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias);

}  // namespace adctl

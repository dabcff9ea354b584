// What token_transpose.cc keeps for the tests (tests/worker/kernels/token_transpose_test.cc,
// tests/gpu/kernels/): the fused autograd functions called directly (their CPU side is LibTorch's
// copy of the transposed view).
#pragma once

#include <torch/torch.h>

namespace adctl {

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (The dispatchers of token_transpose.h pick
// between these and the plain composition.)
torch::Tensor FusedTranspose(const torch::Tensor& x);
torch::Tensor FusedAddTransposed(const torch::Tensor& x, const torch::Tensor& y);

}  // namespace adctl

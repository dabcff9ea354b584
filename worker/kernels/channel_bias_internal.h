// What channel_bias.cc keeps for the tests (tests/worker/kernels/channel_bias_test.cc,
// tests/gpu/kernels/): the fused autograd function called directly (its CPU side is the
// composition).
#pragma once

#include <torch/torch.h>

namespace adctl {

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (The dispatchers of channel_bias.h pick
// between these and the plain composition.)
torch::Tensor FusedAddChannelBias(const torch::Tensor& a, const torch::Tensor& b,
                                  const torch::Tensor& bias);

}  // namespace adctl

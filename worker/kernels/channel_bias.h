// The ResNets' channel-bias sums (channel_bias.cu's one pass on channels-last CUDA maps while the
// fused kernels are on).
#pragma once

#include <torch/torch.h>

namespace adctl {

// a + b + bias for maps a, b [N, C, ...] (b may be undefined) and bias [C], or [R, C] with R
// dividing N, sample i taking row i / (N / R) (a ResNet's time embedding: one row a clip, its
// N / R frames). One pass on CUDA for channels-last maps (LibTorch adds a convolution's bias and
// a broadcast [N, C, 1, 1] with strided passes of their own), the sum in fp32 rounded once; the
// composition elsewhere. ChannelBiasKernelApplies: whether the kernel serves a.
bool ChannelBiasKernelApplies(const torch::Tensor& a);
torch::Tensor AddChannelBias(const torch::Tensor& a, const torch::Tensor& b,
                             const torch::Tensor& bias);

}  // namespace adctl

// Fused operations of the UNet's training step: what torch.compile fuses and LibTorch runs as
// separate kernels, one op a home (worker/kernels/<op>.{h,cc,cu}). Each is an autograd function
// with two implementations of one formula:
//   - CUDA kernels of our own (<op>.cu; the CUDA build only), reading and writing each
//     activation once where LibTorch's composition makes several passes, and saving less for the
//     backward (GroupNorm+SiLU keeps x and two numbers per group, not GroupNorm's output; GEGLU
//     keeps its input, not GELU's output; short attention q, k, v and one number per query,
//     not the output);
//   - the same math in LibTorch operations (namespace fused_reference, <op>_internal.h), which
//     the CPU tests compare with autograd's gradient of the composition, and the GPU tests compare
//     the kernels with (tests/worker/kernels/, tests/gpu/kernels/).
// The layers call GroupNormSilu / GroupNormPlain (group_norm.h) / LayerNorm (layer_norm.h) /
// Linear (linear.h) / Geglu (geglu.h) / TransposeTokens / AddTransposed (token_transpose.h) /
// AddChannelBias (channel_bias.h) (and FusedShortSelfAttention where ShortAttentionApplies,
// short_attention.h): the fused kernels for CUDA tensors while SetFusedKernels(true)
// (train.fused_kernels), LibTorch's composition otherwise. This header holds the switch they share.
#pragma once

#include <torch/torch.h>

namespace adctl {

// Whether this build has the CUDA kernels.
bool FusedKernelsBuilt();
// x [N, C, ...] stored channels-last ([N, ..., C] contiguous, and not also contiguous as it is):
// the layout the UNet runs in on CUDA (UNet3DImpl::set_channels_last).
bool IsChannelsLast(const torch::Tensor& x);

// Process-wide switch (the trainer sets it from train.fused_kernels); on by default.
void SetFusedKernels(bool on);
bool FusedKernelsEnabled();

}  // namespace adctl

// The layout changes into and out of the token sequences (token_transpose.cu's tiled kernel on
// CUDA tensors while the fused kernels are on).
#pragma once

#include <torch/torch.h>

namespace adctl {

// [B, R, S] → [B, S, R], contiguous: the layout changes into and out of the token sequences,
// e.g. a transformer's [N, C, H·W] feature map to [N, H·W, C] tokens, a motion module's
// [B, F·C, H·W] clip to [B, H·W, F·C] (each pixel's frames in a row). LibTorch's copy of a
// transposed view reads one side with a stride; the kernel goes through shared-memory tiles.
torch::Tensor TransposeTokens(const torch::Tensor& x);
// x + yᵀ for x [B, R, S], y [B, S, R]: the way back from tokens with the residual added in the
// same pass. Result [B, R, S], contiguous, x's dtype.
torch::Tensor AddTransposed(const torch::Tensor& x, const torch::Tensor& y);

}  // namespace adctl

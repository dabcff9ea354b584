// GEGLU (geglu.cu's element-wise kernels on CUDA tensors while the fused kernels are on; the
// backward keeps the input, not GELU's output).
#pragma once

#include <torch/torch.h>

namespace adctl {

// a · GELU(g) for h = [a, g] split in halves along the last dimension (diffusers' GEGLU after
// its projection).
torch::Tensor Geglu(const torch::Tensor& h);

}  // namespace adctl

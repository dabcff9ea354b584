// A linear layer whose trainable bias's gradient is summed by a column-strip kernel on CUDA
// (layer_norm.cu's ColumnSums).
#pragma once

#include <torch/torch.h>

namespace adctl {

// x Wᵀ + b: LibTorch's linear, with a trainable bias's gradient (the motion modules') summed over
// the rows by a column-strip kernel on CUDA in place of LibTorch's row reduction.
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias);

}  // namespace adctl

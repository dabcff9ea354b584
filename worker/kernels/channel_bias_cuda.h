// The channel-bias sum's CUDA kernel behind worker/kernels/channel_bias.h, a plain function on
// raw device pointers (worker/kernels/cuda_common.h says how they are called).
#pragma once

#include <cstdint>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

// out = a + b + bias over channels-last maps [n, s, c] (NHWC, s = H·W): bias is [bias_rows, c]
// fp32, sample i taking row i / (n / bias_rows) (one row for all; a ResNet's time embedding, one
// row a clip of n / bias_rows frames); b may be null. out may be a (in place).
int AddChannelBias(DType dtype, const void* a, const void* b, const float* bias, void* out,
                   int64_t n, int64_t s, int64_t c, int64_t bias_rows, void* stream);

}  // namespace adctl::fused_cuda

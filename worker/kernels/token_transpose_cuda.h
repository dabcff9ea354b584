// The token layout changes' CUDA kernels behind worker/kernels/token_transpose.h, a plain
// function on raw device pointers (worker/kernels/cuda_common.h says how they are called).
#pragma once

#include <cstdint>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

// out[b, j, i] = in[b, i, j] (+ add[b, j, i] where add is not null): in is [batch, rows, cols],
// out and add [batch, cols, rows]. The layout changes around the transformers' and motion
// modules' token sequences ([N, C, HW] ↔ [N, HW, C], [B, F·C, HW] ↔ [B, HW, F·C]), the residual
// add folded in. batch ≤ 65535, rows ≤ 65535 · 32.
int BatchedTranspose(DType dtype, const void* in, const void* add, void* out, int64_t batch,
                     int64_t rows, int64_t cols, void* stream);

}  // namespace adctl::fused_cuda

// GEGLU's CUDA kernels behind worker/kernels/geglu.h, as plain functions on raw device pointers
// (worker/kernels/cuda_common.h says how they are called). h is [rows, 2e].
#pragma once

#include <cstdint>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

// GEGLU: out[r, j] = h[r, j] · GELU(h[r, e + j]) (exact, erf GELU), out is [rows, e].
int GegluForward(DType dtype, const void* h, void* out, int64_t rows, int64_t e, void* stream);

// dh = [dout · GELU(g), dout · a · GELU'(g)] for h = [a, g].
int GegluBackward(DType dtype, const void* dout, const void* h, void* dh, int64_t rows, int64_t e,
                  void* stream);

}  // namespace adctl::fused_cuda

// LayerNorm's CUDA kernels behind worker/kernels/layer_norm.h, and the column sums of a linear
// layer's bias gradient (worker/kernels/linear.h) that share its γ/β-gradient kernel, as plain
// functions on raw device pointers (worker/kernels/cuda_common.h says how they are called).
#pragma once

#include <cstdint>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

// LayerNorm over the last dimension of x [rows, c]: y = (x − mean) · rstd · γ + β (+ add), one
// warp per row with the row in registers. gamma and beta ([c], x's dtype) may be null; add
// ([period, c], x's dtype, may be null) is added to row r as its row (r / repeat) mod period
// (the motion modules' positions: period F on [N, F, C] tokens with repeat 1, on a channels-last
// clip's [B, F, H·W, C] rows with repeat H·W). mean and rstd: [rows], fp32.
// LayerNormFits says which c the kernels take (up to 2048 for bf16/fp16 and 1024 for fp32 when c
// is a multiple of 16 bytes and the pointers 16-byte aligned; up to 256 otherwise).
constexpr int kLayerNormMaxRowVectors = 8 * 32;
bool LayerNormFits(DType dtype, int64_t c);
int LayerNormForward(DType dtype, const void* x, const void* gamma, const void* beta,
                     const void* add, int64_t period, int64_t repeat, void* y, float* mean,
                     float* rstd, int64_t rows, int64_t c, float eps, void* stream);
// dx from dy and the forward's input and statistics, + dres ([rows, c], may be null: the gradient
// of x's other use, a residual's). Where partial is not null, also γ's and
// β's gradients in pieces (a second kernel, reading x and dy by column strips): partial is
// [LayerNormPartialBlocks(rows, c), 2, c] fp32, and the sum over its first dimension is
// [Σ dy · x̂, Σ dy].
int64_t LayerNormPartialBlocks(int64_t rows, int64_t c);
int LayerNormBackward(DType dtype, const void* dy, const void* x, const float* mean,
                      const float* rstd, const void* gamma, const void* dres, void* dx,
                      float* partial, int64_t rows, int64_t c, void* stream);
// Σ over the rows of dy [rows, c] (a linear layer's bias gradient), in pieces as above: partial
// is [LayerNormPartialBlocks(rows, c), 2, c] and the sums are in [:, 1] (the [:, 0] are zero).
int ColumnSums(DType dtype, const void* dy, float* partial, int64_t rows, int64_t c, void* stream);

}  // namespace adctl::fused_cuda

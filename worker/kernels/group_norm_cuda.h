// GroupNorm (+ SiLU)'s CUDA kernels behind worker/kernels/group_norm.h, as plain functions on raw
// device pointers (worker/kernels/cuda_common.h says how they are called). x is [n, c, hw] (NCHW
// with the spatial dimensions flattened); statistics are fp32.
#pragma once

#include <cstdint>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

// y = SiLU(GroupNorm(x)) (GroupNorm(x) when !silu), and the groups' mean and 1/σ ([n, groups],
// fp32) for the backward. gamma and beta ([c], x's dtype) may be null (no affine).
int GroupNormSiluForward(DType dtype, const void* x, const void* gamma, const void* beta, void* y,
                         float* mean, float* rstd, int64_t n, int64_t c, int64_t hw, int64_t groups,
                         float eps, bool silu, void* stream);

// dx from dy (the gradient of y) and the forward's input and statistics; γ and β take no
// gradient here (the caller computes theirs when they need one).
int GroupNormSiluBackward(DType dtype, const void* dy, const void* x, const float* mean,
                          const float* rstd, const void* gamma, const void* beta, void* dx,
                          int64_t n, int64_t c, int64_t hw, int64_t groups, bool silu,
                          void* stream);

// γ's and β's gradients where they train (the motion modules' GroupNorm): out is [n, 2, c] fp32,
// per sample [Σ dz · x̂, Σ dz] over its hw elements of each channel (dz = dy, or through the
// SiLU); the caller sums the samples'.
int GroupNormAffineBackward(DType dtype, const void* dy, const void* x, const float* mean,
                            const float* rstd, const void* gamma, const void* beta, float* out,
                            int64_t n, int64_t c, int64_t hw, int64_t groups, bool silu,
                            void* stream);

// The same on channels-last x: sample i is s rows of c channels ([n, s, c]: NHWC with
// s = H·W, or a motion module's clip [B, F·H·W, C]), y likewise. Two kernels each way: sums of
// each group per chunk of rows into `partial` (scratch, [n, GroupNormChannelsLastChunks(n, s),
// groups, 2] fp32), then the element-wise pass. GroupNormChannelsLastFits: c a multiple of
// groups, and at most 512 vectors of c / groups' widest divisor (≤ 16 bytes) a row. The
// backward adds dres (rows of c channels `dres_pitch` elements apart, c when packed; may be null:
// the gradient of x's other use, a residual's) to dx; its `affine` (null where γ and β are frozen)
// gets [n · chunks, 2, c] fp32: per chunk each channel's [Σ dz · x̂, Σ dz]; the caller sums the
// chunks'.
bool GroupNormChannelsLastFits(DType dtype, int64_t c, int64_t groups);
int64_t GroupNormChannelsLastChunks(int64_t n, int64_t s);
int GroupNormChannelsLastForward(DType dtype, const void* x, const void* gamma, const void* beta,
                                 void* y, float* mean, float* rstd, float* partial, int64_t n,
                                 int64_t s, int64_t c, int64_t groups, float eps, bool silu,
                                 void* stream);
int GroupNormChannelsLastBackward(DType dtype, const void* dy, const void* x, const float* mean,
                                  const float* rstd, const void* gamma, const void* beta,
                                  const void* dres, int64_t dres_pitch, void* dx, float* partial,
                                  float* affine, int64_t n, int64_t s, int64_t c, int64_t groups,
                                  bool silu, void* stream);

}  // namespace adctl::fused_cuda

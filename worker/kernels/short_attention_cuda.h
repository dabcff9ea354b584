// Short attention's CUDA kernels behind worker/kernels/short_attention.h, as plain functions on
// raw device pointers (worker/kernels/cuda_common.h says how they are called).
#pragma once

#include <cstdint>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

// Self-attention over short sequences (length ≤ kShortAttentionMaxLength, e.g. the motion
// modules' 16 frames), everything in shared memory: one warp per (sequence, head) where the head
// dimension and `stride` are divisible by 4 (and the pointers aligned to 4 elements) — on tensor
// cores for bf16/fp16 and length ≤ 16 on compute capability ≥ 8.0 —, one block per (sequence,
// head) otherwise. q, k, v are [n, length, ·] with rows `stride` elements apart
// (heads · head_dim when separate, 3 · heads · head_dim when they are the thirds of one
// projection's output), head h at columns h · head_dim …; out is [n, length, heads · head_dim];
// lse [n · heads, length] fp32 (each row's log-sum-exp of the scaled scores, for the backward).
// interleave P > 1: the n sequences are the pixels of n / P channels-last clips [F, P, ·]
// (length F, rows P apart: sequence i's row j is row (i / P · F + j) · P + i % P), q, k, v and
// out alike; P divides n.
constexpr int kShortAttentionMaxLength = 32;
constexpr int kShortAttentionMaxHeadDim = 256;
int ShortAttentionForward(DType dtype, const void* q, const void* k, const void* v, void* out,
                          float* lse, int64_t n, int64_t length, int64_t heads, int64_t head_dim,
                          int64_t stride, int64_t interleave, float scale, void* stream);
// dq, dk, dv (q's layout, `stride`) from dout (out's); the softmax is recomputed from q, k and
// lse.
int ShortAttentionBackward(DType dtype, const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, void* dq, void* dk, void* dv, int64_t n,
                           int64_t length, int64_t heads, int64_t head_dim, int64_t stride,
                           int64_t interleave, float scale, void* stream);

}  // namespace adctl::fused_cuda

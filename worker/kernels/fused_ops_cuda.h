// The CUDA kernels behind worker/kernels/fused_ops.h, as plain functions on raw device
// pointers: this header and its .cu include neither LibTorch nor CUDA headers' types, so the
// kernels compile with nvcc alone and the CPU build never sees them. Every call is enqueued on
// `stream` (a cudaStream_t) and returns 0 or the cudaError_t of the launch;
// FusedCudaErrorString names it. Tensors are contiguous; x is [n, c, hw] (NCHW with the spatial
// dimensions flattened), h is [rows, 2e]; statistics are fp32.
#pragma once

#include <cstdint>

namespace adctl::fused_cuda {

enum class DType { kFloat32, kBFloat16, kFloat16 };

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

// GEGLU: out[r, j] = h[r, j] · GELU(h[r, e + j]) (exact, erf GELU), out is [rows, e].
int GegluForward(DType dtype, const void* h, void* out, int64_t rows, int64_t e, void* stream);

// dh = [dout · GELU(g), dout · a · GELU'(g)] for h = [a, g].
int GegluBackward(DType dtype, const void* dout, const void* h, void* dh, int64_t rows, int64_t e,
                  void* stream);

// out = a + b + bias over channels-last maps [n, s, c] (NHWC, s = H·W): bias is [bias_rows, c]
// fp32, sample i taking row i / (n / bias_rows) (one row for all; a ResNet's time embedding, one
// row a clip of n / bias_rows frames); b may be null. out may be a (in place).
int AddChannelBias(DType dtype, const void* a, const void* b, const float* bias, void* out,
                   int64_t n, int64_t s, int64_t c, int64_t bias_rows, void* stream);

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

// out[b, j, i] = in[b, i, j] (+ add[b, j, i] where add is not null): in is [batch, rows, cols],
// out and add [batch, cols, rows]. The layout changes around the transformers' and motion
// modules' token sequences ([N, C, HW] ↔ [N, HW, C], [B, F·C, HW] ↔ [B, HW, F·C]), the residual
// add folded in. batch ≤ 65535, rows ≤ 65535 · 32.
int BatchedTranspose(DType dtype, const void* in, const void* add, void* out, int64_t batch,
                     int64_t rows, int64_t cols, void* stream);

const char* FusedCudaErrorString(int error);

}  // namespace adctl::fused_cuda

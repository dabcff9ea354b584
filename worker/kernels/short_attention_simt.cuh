// Short attention's kernels on CUDA cores (included by short_attention.cu only): the block kernel
// of any head dimension, and the warp kernels of head dimensions divisible by 4. The tensor-core
// kernels and the launchers that choose among the three are in short_attention.cu.
#pragma once

#include "worker/kernels/cuda_common.cuh"
#include "worker/kernels/short_attention_cuda.h"

namespace adctl::fused_cuda {
namespace {

// Short-sequence self-attention: block (sequence n, head h) loads its [L, d] slices of q, k, v
// into shared memory (rows padded to d + 1 floats: conflict-free column walks), forms the L × L
// scores, their softmax and the output. The backward recomputes the softmax from the saved
// log-sum-exp and takes D_i = Σ_j P_ij dP_ij (= Σ_c dO_ic O_ic), so the output is not saved.
constexpr int kAttentionThreads = 128;

// Where a (sequence, head) pair lives: q, k, v rows `in_row` apart from in_base, out and dout
// rows `row` apart from base. Sequence n's rows: rows n · length … of [n, length, ·] tokens, or,
// with interleave P > 1, rows (n / P · length + i) · P + n % P, i < length: each pixel's frames
// of a channels-last clip [B, F, P, ·] (P = H·W) without transposing it to [B·P, F, ·].
struct PairRows {
  int64_t base, in_base, row, in_row;
};

__device__ __forceinline__ PairRows RowsOf(int64_t pair, int heads, int length, int d,
                                           int64_t stride, int64_t interleave) {
  const int64_t n = pair / heads, h = pair % heads;
  const int64_t first = n / interleave * length * interleave + n % interleave;
  const int64_t row = static_cast<int64_t>(heads) * d;
  return {first * row + h * d, first * stride + h * d, row * interleave, stride * interleave};
}

template <typename T>
__device__ void LoadRows(const T* src, float* dst, int64_t base, int64_t row, int length, int d,
                         int ld) {
  for (int idx = threadIdx.x; idx < length * d; idx += kAttentionThreads) {
    const int i = idx / d, c = idx % d;
    dst[i * ld + c] = Load(src[base + i * row + c]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    ShortAttentionForwardKernel(const T* q, const T* k, const T* v, T* out, float* lse, int length,
                                int heads, int d, int64_t stride, int64_t interleave, float scale) {
  extern __shared__ float smem[];
  const int ld = d + 1, ls = length + 1;
  float* Q = smem;
  float* K = Q + length * ld;
  float* V = K + length * ld;
  float* P = V + length * ld;
  const PairRows at = RowsOf(blockIdx.x, heads, length, d, stride, interleave);
  LoadRows(q, Q, at.in_base, at.in_row, length, d, ld);
  LoadRows(k, K, at.in_base, at.in_row, length, d, ld);
  LoadRows(v, V, at.in_base, at.in_row, length, d, ld);
  __syncthreads();
  for (int idx = threadIdx.x; idx < length * length; idx += kAttentionThreads) {
    const int i = idx / length, j = idx % length;
    float s = 0.f;
    for (int c = 0; c < d; ++c) s += Q[i * ld + c] * K[j * ld + c];
    P[i * ls + j] = s * scale;
  }
  __syncthreads();
  if (threadIdx.x < length) {
    const int i = threadIdx.x;
    float m = -INFINITY;
    for (int j = 0; j < length; ++j) m = fmaxf(m, P[i * ls + j]);
    float sum = 0.f;
    for (int j = 0; j < length; ++j) {
      const float e = expf(P[i * ls + j] - m);
      P[i * ls + j] = e;
      sum += e;
    }
    const float inv = 1.f / sum;
    for (int j = 0; j < length; ++j) P[i * ls + j] *= inv;
    lse[static_cast<int64_t>(blockIdx.x) * length + i] = m + logf(sum);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < length * d; idx += kAttentionThreads) {
    const int i = idx / d, c = idx % d;
    float o = 0.f;
    for (int j = 0; j < length; ++j) o += P[i * ls + j] * V[j * ld + c];
    out[at.base + i * at.row + c] = Store<T>(o);
  }
}

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    ShortAttentionBackwardKernel(const T* dout, const T* q, const T* k, const T* v,
                                 const float* lse, T* dq, T* dk, T* dv, int length, int heads,
                                 int d, int64_t stride, int64_t interleave, float scale) {
  extern __shared__ float smem[];
  const int ld = d + 1, ls = length + 1;
  float* Q = smem;
  float* K = Q + length * ld;
  float* V = K + length * ld;
  float* dO = V + length * ld;
  float* P = dO + length * ld;
  float* dS = P + length * ls;
  float* D = dS + length * ls;
  const PairRows at = RowsOf(blockIdx.x, heads, length, d, stride, interleave);
  const float* row_lse = lse + static_cast<int64_t>(blockIdx.x) * length;
  LoadRows(q, Q, at.in_base, at.in_row, length, d, ld);
  LoadRows(k, K, at.in_base, at.in_row, length, d, ld);
  LoadRows(v, V, at.in_base, at.in_row, length, d, ld);
  LoadRows(dout, dO, at.base, at.row, length, d, ld);
  __syncthreads();
  for (int idx = threadIdx.x; idx < length * length; idx += kAttentionThreads) {
    const int i = idx / length, j = idx % length;
    float s = 0.f, dp = 0.f;
    for (int c = 0; c < d; ++c) {
      s += Q[i * ld + c] * K[j * ld + c];
      dp += dO[i * ld + c] * V[j * ld + c];
    }
    P[i * ls + j] = expf(s * scale - row_lse[i]);
    dS[i * ls + j] = dp;
  }
  __syncthreads();
  if (threadIdx.x < length) {
    const int i = threadIdx.x;
    float sum = 0.f;
    for (int j = 0; j < length; ++j) sum += P[i * ls + j] * dS[i * ls + j];
    D[i] = sum;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < length * length; idx += kAttentionThreads) {
    const int i = idx / length, j = idx % length;
    dS[i * ls + j] = P[i * ls + j] * (dS[i * ls + j] - D[i]);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < length * d; idx += kAttentionThreads) {
    const int r = idx / d, c = idx % d;  // row r of dq (a query) and of dk, dv (a key)
    float gq = 0.f, gk = 0.f, gv = 0.f;
    for (int t = 0; t < length; ++t) {
      gq += dS[r * ls + t] * K[t * ld + c];
      gk += dS[t * ls + r] * Q[t * ld + c];
      gv += P[t * ls + r] * dO[t * ld + c];
    }
    const int64_t g = at.in_base + r * at.in_row + c;
    dq[g] = Store<T>(gq * scale);
    dk[g] = Store<T>(gk * scale);
    dv[g] = Store<T>(gv);
  }
}

// Short attention for head dims divisible by 4 (the motion modules' 40, 80, 160): one warp per
// (sequence, head), a few warps per block, no block-wide barriers. Rows live in shared memory as
// fp32, padded to d + 4 floats (16-byte aligned, and 8 consecutive rows of float4 loads hit
// distinct banks). Lane (i, s) = (lane % L, lane / L) owns query row i and the key columns
// j = s, s + S, s + 2S, … (S = 32 / L lanes share a row): each float4 of q_i is loaded once for
// kCols dot products, where the generic kernel above loads two operands per product. The
// products' outputs ([L, d] of out, dq, dk, dv) are spread over the lanes 4 columns at a time.
constexpr int kWarpAttentionMaxWarps = 4;

struct WarpAttentionShape {
  int length, d, ld, ls, split;  // split: lanes per row, 32 / length
};

__host__ __device__ inline int RoundUp4(int v) { return (v + 3) / 4 * 4; }

__host__ __device__ inline WarpAttentionShape MakeWarpAttentionShape(int length, int d) {
  return {length, d, d + 4, length + 1, 32 / length};
}

// Floats of shared memory per warp: `rows` [L, ld] arrays, `squares` [L, ls] arrays, 32 of scratch.
__host__ __device__ inline int WarpAttentionFloats(const WarpAttentionShape& s, int rows,
                                                   int squares) {
  return rows * s.length * s.ld + squares * RoundUp4(s.length * s.ls) + 32;
}

template <typename T>
__device__ void LoadRows4(const T* src, float* dst, int64_t base, int64_t row,
                          const WarpAttentionShape& s, int lane) {
  const int chunks = s.d / 4;
  for (int idx = lane; idx < s.length * chunks; idx += 32) {
    const int i = idx / chunks, c = idx % chunks * 4;
    const Vec<T, 4> in = *reinterpret_cast<const Vec<T, 4>*>(src + base + i * row + c);
    *reinterpret_cast<float4*>(dst + i * s.ld + c) =
        make_float4(Load(in.v[0]), Load(in.v[1]), Load(in.v[2]), Load(in.v[3]));
  }
}

template <typename T>
__device__ void StoreRow4(T* dst, float4 v) {
  Vec<T, 4> out;
  out.v[0] = Store<T>(v.x);
  out.v[1] = Store<T>(v.y);
  out.v[2] = Store<T>(v.z);
  out.v[3] = Store<T>(v.w);
  *reinterpret_cast<Vec<T, 4>*>(dst) = out;
}

__device__ __forceinline__ float Dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

__device__ __forceinline__ void Fma4(float4& acc, float p, float4 v) {
  acc.x += p * v.x;
  acc.y += p * v.y;
  acc.z += p * v.z;
  acc.w += p * v.w;
}

// The sum (or maximum) of v over the lanes sharing row `row` (lanes row + L·s, s < split).
__device__ float RowReduce(float v, bool max, float* scratch, int lane, int row,
                           const WarpAttentionShape& s) {
  __syncwarp();
  scratch[lane] = v;
  __syncwarp();
  float r = scratch[row];
  for (int k = 1; k < s.split; ++k) {
    const float o = scratch[row + k * s.length];
    r = max ? fmaxf(r, o) : r + o;
  }
  __syncwarp();
  return r;
}

template <typename T, int kCols>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    WarpAttentionForwardKernel(const T* q, const T* k, const T* v, T* out, float* lse,
                               int64_t pairs, int heads, WarpAttentionShape s, int64_t stride,
                               int64_t interleave, float scale) {
  extern __shared__ float4 smem4[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (pair >= pairs) return;
  float* Q = reinterpret_cast<float*>(smem4) + warp * WarpAttentionFloats(s, 3, 1);
  float* K = Q + s.length * s.ld;
  float* V = K + s.length * s.ld;
  float* P = V + s.length * s.ld;
  float* scratch = P + RoundUp4(s.length * s.ls);
  const PairRows at = RowsOf(pair, heads, s.length, s.d, stride, interleave);
  LoadRows4(q, Q, at.in_base, at.in_row, s, lane);
  LoadRows4(k, K, at.in_base, at.in_row, s, lane);
  LoadRows4(v, V, at.in_base, at.in_row, s, lane);
  __syncwarp();

  const int i = lane % s.length, split = lane / s.length;
  const bool active = split < s.split;
  float acc[kCols];
#pragma unroll
  for (int t = 0; t < kCols; ++t) acc[t] = 0.f;
  if (active) {
    for (int c = 0; c < s.d; c += 4) {
      const float4 a = *reinterpret_cast<const float4*>(Q + i * s.ld + c);
#pragma unroll
      for (int t = 0; t < kCols; ++t) {
        const int j = split + t * s.split;
        if (j < s.length) acc[t] += Dot4(a, *reinterpret_cast<const float4*>(K + j * s.ld + c));
      }
    }
  }
  float m = -INFINITY;
#pragma unroll
  for (int t = 0; t < kCols; ++t) {
    acc[t] *= scale;
    if (active && split + t * s.split < s.length) m = fmaxf(m, acc[t]);
  }
  m = RowReduce(m, true, scratch, lane, i, s);
  float sum = 0.f;
#pragma unroll
  for (int t = 0; t < kCols; ++t) {
    acc[t] = active && split + t * s.split < s.length ? expf(acc[t] - m) : 0.f;
    sum += acc[t];
  }
  sum = RowReduce(sum, false, scratch, lane, i, s);
  if (active) {
    const float inv = 1.f / sum;
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      const int j = split + t * s.split;
      if (j < s.length) P[i * s.ls + j] = acc[t] * inv;
    }
    if (split == 0) lse[pair * s.length + i] = m + logf(sum);
  }
  __syncwarp();

  const int chunks = s.d / 4;
  for (int u = lane; u < s.length * chunks; u += 32) {
    const int r = u / chunks, c = u % chunks * 4;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int j = 0; j < s.length; ++j) {
      Fma4(o, P[r * s.ls + j], *reinterpret_cast<const float4*>(V + j * s.ld + c));
    }
    StoreRow4(out + at.base + r * at.row + c, o);
  }
}

template <typename T, int kCols>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    WarpAttentionBackwardKernel(const T* dout, const T* q, const T* k, const T* v, const float* lse,
                                T* dq, T* dk, T* dv, int64_t pairs, int heads, WarpAttentionShape s,
                                int64_t stride, int64_t interleave, float scale) {
  extern __shared__ float4 smem4[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (pair >= pairs) return;
  float* Q = reinterpret_cast<float*>(smem4) + warp * WarpAttentionFloats(s, 4, 2);
  float* K = Q + s.length * s.ld;
  float* V = K + s.length * s.ld;
  float* dO = V + s.length * s.ld;
  float* P = dO + s.length * s.ld;
  float* dS = P + RoundUp4(s.length * s.ls);
  float* scratch = dS + RoundUp4(s.length * s.ls);
  const PairRows at = RowsOf(pair, heads, s.length, s.d, stride, interleave);
  LoadRows4(q, Q, at.in_base, at.in_row, s, lane);
  LoadRows4(k, K, at.in_base, at.in_row, s, lane);
  LoadRows4(v, V, at.in_base, at.in_row, s, lane);
  LoadRows4(dout, dO, at.base, at.row, s, lane);
  __syncwarp();

  // P_ij recomputed from the saved log-sum-exp, dP_ij = dO_i · V_j, D_i = Σ_j P_ij dP_ij,
  // dS_ij = P_ij (dP_ij − D_i).
  const int i = lane % s.length, split = lane / s.length;
  const bool active = split < s.split;
  float p[kCols], dp[kCols];
#pragma unroll
  for (int t = 0; t < kCols; ++t) p[t] = dp[t] = 0.f;
  if (active) {
    for (int c = 0; c < s.d; c += 4) {
      const float4 a = *reinterpret_cast<const float4*>(Q + i * s.ld + c);
      const float4 g = *reinterpret_cast<const float4*>(dO + i * s.ld + c);
#pragma unroll
      for (int t = 0; t < kCols; ++t) {
        const int j = split + t * s.split;
        if (j < s.length) {
          p[t] += Dot4(a, *reinterpret_cast<const float4*>(K + j * s.ld + c));
          dp[t] += Dot4(g, *reinterpret_cast<const float4*>(V + j * s.ld + c));
        }
      }
    }
  }
  const float row_lse = active ? lse[pair * s.length + i] : 0.f;
  float partial = 0.f;
#pragma unroll
  for (int t = 0; t < kCols; ++t) {
    p[t] = active && split + t * s.split < s.length ? expf(p[t] * scale - row_lse) : 0.f;
    partial += p[t] * dp[t];
  }
  const float D = RowReduce(partial, false, scratch, lane, i, s);
  if (active) {
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      const int j = split + t * s.split;
      if (j < s.length) {
        P[i * s.ls + j] = p[t];
        dS[i * s.ls + j] = p[t] * (dp[t] - D);
      }
    }
  }
  __syncwarp();

  const int chunks = s.d / 4;
  for (int u = lane; u < s.length * chunks; u += 32) {
    const int r = u / chunks, c = u % chunks * 4;  // row r of dq (a query) and of dk, dv (a key)
    float4 gq = make_float4(0.f, 0.f, 0.f, 0.f), gk = gq, gv = gq;
    for (int t = 0; t < s.length; ++t) {
      Fma4(gq, dS[r * s.ls + t], *reinterpret_cast<const float4*>(K + t * s.ld + c));
      Fma4(gk, dS[t * s.ls + r], *reinterpret_cast<const float4*>(Q + t * s.ld + c));
      Fma4(gv, P[t * s.ls + r], *reinterpret_cast<const float4*>(dO + t * s.ld + c));
    }
    const int64_t g = at.in_base + r * at.in_row + c;
    StoreRow4(dq + g, make_float4(gq.x * scale, gq.y * scale, gq.z * scale, gq.w * scale));
    StoreRow4(dk + g, make_float4(gk.x * scale, gk.y * scale, gk.z * scale, gk.w * scale));
    StoreRow4(dv + g, gv);
  }
}

}  // namespace
}  // namespace adctl::fused_cuda

// Fused element-wise kernels for the UNet's training step (worker/kernels/fused_ops.h says what
// each computes and which LibTorch composition it replaces). Memory-bound: each reads and writes
// every element as few times as the math allows, V elements per load (16 bytes), in fp32
// registers whatever the storage dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "worker/kernels/fused_ops_cuda.h"

namespace adctl::fused_cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Load(float v) { return v; }
__device__ __forceinline__ float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float Load(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T Store(float v);
template <>
__device__ __forceinline__ float Store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 Store<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half Store<__half>(float v) {
  return __float2half(v);
}

// V elements moved by one load or store instruction.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of v over the block (kThreads threads), in every thread. `shared`: kThreads / 32 floats.
__device__ float BlockSum(float v, float* shared) {
  v = WarpSum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // a previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return WarpSum(lane < kThreads / 32 ? shared[lane] : 0.f);
}

__device__ __forceinline__ float Sigmoid(float z) { return 1.f / (1.f + expf(-z)); }

// GELU(x) = x·Φ(x) and its derivative Φ(x) + x·φ(x), exact (erf) as torch::gelu's default.
__device__ __forceinline__ float Gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678f)); }
__device__ __forceinline__ float GeluGrad(float x) {
  const float cdf = 0.5f * (1.f + erff(x * 0.70710678f));
  const float pdf = 0.39894228f * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

// One block per (sample, group): the group's elements are contiguous (channels g·c/G … of one
// sample, hw each). Mean, then the mean squared deviation (exact two-pass variance, the second
// read mostly from L2), then the normalised, affine (and, with Silu, SiLU'd) output.
template <typename T, int V, bool Silu>
__global__ void __launch_bounds__(kThreads)
    GroupNormSiluForwardKernel(const T* x, const T* gamma, const T* beta, T* y, float* mean_out,
                               float* rstd_out, int64_t c, int64_t hw, int64_t groups, float eps) {
  __shared__ float shared[kThreads / 32];
  using VecT = Vec<T, V>;
  const int64_t group = blockIdx.x;
  const int64_t cg = c / groups, size = cg * hw, vecs = size / V;
  const int64_t first_channel = (group % groups) * cg;
  const VecT* xg = reinterpret_cast<const VecT*>(x + group * size);
  VecT* yg = reinterpret_cast<VecT*>(y + group * size);

  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
    const VecT in = xg[i];
#pragma unroll
    for (int k = 0; k < V; ++k) sum += Load(in.v[k]);
  }
  const float mean = BlockSum(sum, shared) / static_cast<float>(size);
  float squares = 0.f;
  for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
    const VecT in = xg[i];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float d = Load(in.v[k]) - mean;
      squares += d * d;
    }
  }
  const float rstd = rsqrtf(BlockSum(squares, shared) / static_cast<float>(size) + eps);
  if (threadIdx.x == 0) {
    mean_out[group] = mean;
    rstd_out[group] = rstd;
  }
  for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
    const int64_t channel = first_channel + i * V / hw;  // hw % V == 0: one channel per vector
    const float scale = rstd * (gamma ? Load(gamma[channel]) : 1.f);
    const float shift = (beta ? Load(beta[channel]) : 0.f) - mean * scale;
    const VecT in = xg[i];
    VecT out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float z = Load(in.v[k]) * scale + shift;
      out.v[k] = Store<T>(Silu ? z * Sigmoid(z) : z);
    }
    yg[i] = out;
  }
}

// dz = dy · SiLU'(z) with z recomputed from x and the statistics (dz = dy without Silu);
// g = dz · γ; then GroupNorm's input gradient dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) over
// the group.
template <typename T, int V, bool Silu>
__global__ void __launch_bounds__(kThreads)
    GroupNormSiluBackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                const T* gamma, const T* beta, T* dx, int64_t c, int64_t hw,
                                int64_t groups) {
  __shared__ float shared[kThreads / 32];
  using VecT = Vec<T, V>;
  const int64_t group = blockIdx.x;
  const int64_t cg = c / groups, size = cg * hw, vecs = size / V;
  const int64_t first_channel = (group % groups) * cg;
  const VecT* xg = reinterpret_cast<const VecT*>(x + group * size);
  const VecT* dyg = reinterpret_cast<const VecT*>(dy + group * size);
  VecT* dxg = reinterpret_cast<VecT*>(dx + group * size);
  const float mu = mean[group], r = rstd[group];

  // g and x̂ of one element.
  auto grad = [&](float xv, float dyv, float gm, float bt, float* xhat) {
    *xhat = (xv - mu) * r;
    if (!Silu) return dyv * gm;
    const float z = *xhat * gm + bt;
    const float s = Sigmoid(z);
    return dyv * s * (1.f + z * (1.f - s)) * gm;
  };
  float sum_g = 0.f, sum_gx = 0.f;
  for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
    const int64_t channel = first_channel + i * V / hw;
    const float gm = gamma ? Load(gamma[channel]) : 1.f;
    const float bt = beta ? Load(beta[channel]) : 0.f;
    const VecT xv = xg[i], dyv = dyg[i];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float xhat;
      const float g = grad(Load(xv.v[k]), Load(dyv.v[k]), gm, bt, &xhat);
      sum_g += g;
      sum_gx += g * xhat;
    }
  }
  const float mean_g = BlockSum(sum_g, shared) / static_cast<float>(size);
  const float mean_gx = BlockSum(sum_gx, shared) / static_cast<float>(size);
  for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
    const int64_t channel = first_channel + i * V / hw;
    const float gm = gamma ? Load(gamma[channel]) : 1.f;
    const float bt = beta ? Load(beta[channel]) : 0.f;
    const VecT xv = xg[i], dyv = dyg[i];
    VecT out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float xhat;
      const float g = grad(Load(xv.v[k]), Load(dyv.v[k]), gm, bt, &xhat);
      out.v[k] = Store<T>(r * (g - mean_g - xhat * mean_gx));
    }
    dxg[i] = out;
  }
}

// Element-wise over [rows, e] vectors of V, grid-stride.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    GegluForwardKernel(const T* h, T* out, int64_t rows, int64_t e) {
  using VecT = Vec<T, V>;
  const int64_t per_row = e / V, total = rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / per_row, col = i % per_row;
    const VecT a = reinterpret_cast<const VecT*>(h + row * 2 * e)[col];
    const VecT g = reinterpret_cast<const VecT*>(h + row * 2 * e + e)[col];
    VecT o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = Store<T>(Load(a.v[k]) * Gelu(Load(g.v[k])));
    reinterpret_cast<VecT*>(out + row * e)[col] = o;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    GegluBackwardKernel(const T* dout, const T* h, T* dh, int64_t rows, int64_t e) {
  using VecT = Vec<T, V>;
  const int64_t per_row = e / V, total = rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / per_row, col = i % per_row;
    const VecT d = reinterpret_cast<const VecT*>(dout + row * e)[col];
    const VecT a = reinterpret_cast<const VecT*>(h + row * 2 * e)[col];
    const VecT g = reinterpret_cast<const VecT*>(h + row * 2 * e + e)[col];
    VecT da, dg;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float dv = Load(d.v[k]), gv = Load(g.v[k]);
      da.v[k] = Store<T>(dv * Gelu(gv));
      dg.v[k] = Store<T>(dv * Load(a.v[k]) * GeluGrad(gv));
    }
    reinterpret_cast<VecT*>(dh + row * 2 * e)[col] = da;
    reinterpret_cast<VecT*>(dh + row * 2 * e + e)[col] = dg;
  }
}

// Short-sequence self-attention: block (sequence n, head h) loads its [L, d] slices of q, k, v
// into shared memory (rows padded to d + 1 floats: conflict-free column walks), forms the L × L
// scores, their softmax and the output. The backward recomputes the softmax from the saved
// log-sum-exp and takes D_i = Σ_j P_ij dP_ij (= Σ_c dO_ic O_ic), so the output is not saved.
constexpr int kAttentionThreads = 128;

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
                                int heads, int d, int64_t stride, float scale) {
  extern __shared__ float smem[];
  const int ld = d + 1, ls = length + 1;
  float* Q = smem;
  float* K = Q + length * ld;
  float* V = K + length * ld;
  float* P = V + length * ld;
  const int64_t n = blockIdx.x / heads;
  const int h = blockIdx.x % heads;
  const int64_t row = static_cast<int64_t>(heads) * d;  // out's; q, k, v's is `stride`
  const int64_t base = n * length * row + static_cast<int64_t>(h) * d;
  const int64_t in_base = n * length * stride + static_cast<int64_t>(h) * d;
  LoadRows(q, Q, in_base, stride, length, d, ld);
  LoadRows(k, K, in_base, stride, length, d, ld);
  LoadRows(v, V, in_base, stride, length, d, ld);
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
    out[base + i * row + c] = Store<T>(o);
  }
}

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    ShortAttentionBackwardKernel(const T* dout, const T* q, const T* k, const T* v,
                                 const float* lse, T* dq, T* dk, T* dv, int length, int heads,
                                 int d, int64_t stride, float scale) {
  extern __shared__ float smem[];
  const int ld = d + 1, ls = length + 1;
  float* Q = smem;
  float* K = Q + length * ld;
  float* V = K + length * ld;
  float* dO = V + length * ld;
  float* P = dO + length * ld;
  float* dS = P + length * ls;
  float* D = dS + length * ls;
  const int64_t n = blockIdx.x / heads;
  const int h = blockIdx.x % heads;
  const int64_t row = static_cast<int64_t>(heads) * d;  // dout's; q, k, v's is `stride`
  const int64_t base = n * length * row + static_cast<int64_t>(h) * d;
  const int64_t in_base = n * length * stride + static_cast<int64_t>(h) * d;
  const float* row_lse = lse + static_cast<int64_t>(blockIdx.x) * length;
  LoadRows(q, Q, in_base, stride, length, d, ld);
  LoadRows(k, K, in_base, stride, length, d, ld);
  LoadRows(v, V, in_base, stride, length, d, ld);
  LoadRows(dout, dO, base, row, length, d, ld);
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
    const int64_t g = in_base + r * stride + c;
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
                               float scale) {
  extern __shared__ float4 smem4[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (pair >= pairs) return;
  float* Q = reinterpret_cast<float*>(smem4) + warp * WarpAttentionFloats(s, 3, 1);
  float* K = Q + s.length * s.ld;
  float* V = K + s.length * s.ld;
  float* P = V + s.length * s.ld;
  float* scratch = P + RoundUp4(s.length * s.ls);
  const int64_t n = pair / heads;
  const int h = static_cast<int>(pair % heads);
  const int64_t row = static_cast<int64_t>(heads) * s.d;  // out's; q, k, v's is `stride`
  const int64_t base = n * s.length * row + static_cast<int64_t>(h) * s.d;
  const int64_t in_base = n * s.length * stride + static_cast<int64_t>(h) * s.d;
  LoadRows4(q, Q, in_base, stride, s, lane);
  LoadRows4(k, K, in_base, stride, s, lane);
  LoadRows4(v, V, in_base, stride, s, lane);
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
    StoreRow4(out + base + r * row + c, o);
  }
}

template <typename T, int kCols>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    WarpAttentionBackwardKernel(const T* dout, const T* q, const T* k, const T* v, const float* lse,
                                T* dq, T* dk, T* dv, int64_t pairs, int heads, WarpAttentionShape s,
                                int64_t stride, float scale) {
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
  const int64_t n = pair / heads;
  const int h = static_cast<int>(pair % heads);
  const int64_t row = static_cast<int64_t>(heads) * s.d;  // dout's; q, k, v's is `stride`
  const int64_t base = n * s.length * row + static_cast<int64_t>(h) * s.d;
  const int64_t in_base = n * s.length * stride + static_cast<int64_t>(h) * s.d;
  LoadRows4(q, Q, in_base, stride, s, lane);
  LoadRows4(k, K, in_base, stride, s, lane);
  LoadRows4(v, V, in_base, stride, s, lane);
  LoadRows4(dout, dO, base, row, s, lane);
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
    const int64_t g = in_base + r * stride + c;
    StoreRow4(dq + g, make_float4(gq.x * scale, gq.y * scale, gq.z * scale, gq.w * scale));
    StoreRow4(dk + g, make_float4(gk.x * scale, gk.y * scale, gk.z * scale, gk.w * scale));
    StoreRow4(dv + g, gv);
  }
}

// Short attention on tensor cores (bf16/fp16, L ≤ 16: the motion modules' 16 frames): one warp
// per (sequence, head) multiplies 16 × 16 tiles with WMMA, so the work is the loads and stores.
// Rows are padded to 16 with zeros (keys past L masked out of the softmax, queries past L not
// stored), columns to a multiple of 16 (+ 8 elements of row padding against bank conflicts). P
// and dS enter the second products in the input's 16-bit type, as in flash attention; the
// scores, the softmax and every accumulator are fp32. The 16 × 16 fp32 score tile doubles as the
// staging tile of each output block.
constexpr int kMmaRows = 16;

__host__ __device__ inline int MmaRowElements(int d) { return (d + 15) / 16 * 16 + 8; }

// Bytes of shared memory per warp: `tiles` [16, ldt] 16-bit tiles and `squares` pairs of a
// 16 × 16 fp32 and a 16 × 16 16-bit square.
__host__ __device__ inline int MmaWarpBytes(int d, int tiles, int squares) {
  return tiles * kMmaRows * MmaRowElements(d) * 2 + squares * kMmaRows * kMmaRows * (4 + 2);
}

// Rows 0 … 15 of a (sequence, head) slice into a [16, ldt] tile, zeros past `length` rows and
// `d` columns.
template <typename T>
__device__ void LoadMmaTile(const T* src, T* dst, int64_t base, int64_t stride, int length, int d,
                            int ldt, int lane) {
  const int chunks = (ldt - 8) / 4;
  for (int idx = lane; idx < kMmaRows * chunks; idx += 32) {
    const int i = idx / chunks, c = idx % chunks * 4;
    Vec<T, 4> v;
    if (i < length && c < d) {
      v = *reinterpret_cast<const Vec<T, 4>*>(src + base + i * stride + c);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) v.v[e] = Store<T>(0.f);
    }
    *reinterpret_cast<Vec<T, 4>*>(dst + i * ldt + c) = v;
  }
}

// Columns n0 … n0 + 15 of an output block from the fp32 staging tile, times `scale`, rows below
// `length` and columns below `d` only; lane (i, half) writes row i's 8 columns half · 8 ….
template <typename T>
__device__ void StoreMmaTile(T* dst, const float* tile, int64_t base, int64_t row, int n0,
                             int length, int d, int lane, float scale) {
  const int i = lane / 2, first = (lane % 2) * 8;
  if (i >= length) return;
#pragma unroll
  for (int g = 0; g < 8; g += 4) {
    const int c = n0 + first + g;
    if (c >= d) break;
    const float* s = tile + i * kMmaRows + first + g;
    StoreRow4(dst + base + i * row + c,
              make_float4(s[0] * scale, s[1] * scale, s[2] * scale, s[3] * scale));
  }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define ADCTL_MMA_ATTENTION 1
#endif

template <typename T>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    MmaAttentionForwardKernel(const T* q, const T* k, const T* v, T* out, float* lse, int64_t pairs,
                              int heads, int length, int d, int64_t stride, float scale) {
#ifdef ADCTL_MMA_ATTENTION
  using namespace nvcuda;
  using Tile = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  extern __shared__ float4 smem4[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (pair >= pairs) return;
  const int ldt = MmaRowElements(d), dp = ldt - 8;
  T* Q = reinterpret_cast<T*>(reinterpret_cast<char*>(smem4) + warp * MmaWarpBytes(d, 3, 1));
  T* K = Q + kMmaRows * ldt;
  T* V = K + kMmaRows * ldt;
  float* S = reinterpret_cast<float*>(V + kMmaRows * ldt);
  T* P = reinterpret_cast<T*>(S + kMmaRows * kMmaRows);
  const int64_t n = pair / heads;
  const int h = static_cast<int>(pair % heads);
  const int64_t row = static_cast<int64_t>(heads) * d;  // out's; q, k, v's is `stride`
  const int64_t base = n * length * row + static_cast<int64_t>(h) * d;
  const int64_t in_base = n * length * stride + static_cast<int64_t>(h) * d;
  LoadMmaTile(q, Q, in_base, stride, length, d, ldt, lane);
  LoadMmaTile(k, K, in_base, stride, length, d, ldt, lane);
  LoadMmaTile(v, V, in_base, stride, length, d, ldt, lane);
  __syncwarp();

  Tile acc;
  wmma::fill_fragment(acc, 0.f);
  for (int k0 = 0; k0 < dp; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;  // Kᵀ
    wmma::load_matrix_sync(a, Q + k0, ldt);
    wmma::load_matrix_sync(b, K + k0, ldt);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(S, acc, kMmaRows, wmma::mem_row_major);
  __syncwarp();

  const int i = lane / 2, first = (lane % 2) * 8;
  float e[8];
  float m = -INFINITY;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    e[t] = first + t < length ? S[i * kMmaRows + first + t] * scale : -INFINITY;
    m = fmaxf(m, e[t]);
  }
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  float sum = 0.f;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    e[t] = first + t < length ? expf(e[t] - m) : 0.f;
    sum += e[t];
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  const float inv = 1.f / sum;
#pragma unroll
  for (int t = 0; t < 8; ++t) P[i * kMmaRows + first + t] = Store<T>(e[t] * inv);
  if (first == 0 && i < length) lse[pair * length + i] = m + logf(sum);
  __syncwarp();

  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p;
  wmma::load_matrix_sync(p, P, kMmaRows);
  for (int n0 = 0; n0 < dp; n0 += 16) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
    wmma::load_matrix_sync(b, V + n0, ldt);
    wmma::fill_fragment(acc, 0.f);
    wmma::mma_sync(acc, p, b, acc);
    __syncwarp();  // the previous block's readers are done with S
    wmma::store_matrix_sync(S, acc, kMmaRows, wmma::mem_row_major);
    __syncwarp();
    StoreMmaTile(out, S, base, row, n0, length, d, lane, 1.f);
  }
#endif
}

template <typename T>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    MmaAttentionBackwardKernel(const T* dout, const T* q, const T* k, const T* v, const float* lse,
                               T* dq, T* dk, T* dv, int64_t pairs, int heads, int length, int d,
                               int64_t stride, float scale) {
#ifdef ADCTL_MMA_ATTENTION
  using namespace nvcuda;
  using Tile = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  extern __shared__ float4 smem4[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (pair >= pairs) return;
  const int ldt = MmaRowElements(d), dp = ldt - 8;
  T* Q = reinterpret_cast<T*>(reinterpret_cast<char*>(smem4) + warp * MmaWarpBytes(d, 4, 2));
  T* K = Q + kMmaRows * ldt;
  T* V = K + kMmaRows * ldt;
  T* dO = V + kMmaRows * ldt;
  float* S = reinterpret_cast<float*>(dO + kMmaRows * ldt);
  float* dP = S + kMmaRows * kMmaRows;
  T* P = reinterpret_cast<T*>(dP + kMmaRows * kMmaRows);
  T* dS = P + kMmaRows * kMmaRows;
  const int64_t n = pair / heads;
  const int h = static_cast<int>(pair % heads);
  const int64_t row = static_cast<int64_t>(heads) * d;  // dout's; q, k, v's is `stride`
  const int64_t base = n * length * row + static_cast<int64_t>(h) * d;
  const int64_t in_base = n * length * stride + static_cast<int64_t>(h) * d;
  LoadMmaTile(q, Q, in_base, stride, length, d, ldt, lane);
  LoadMmaTile(k, K, in_base, stride, length, d, ldt, lane);
  LoadMmaTile(v, V, in_base, stride, length, d, ldt, lane);
  LoadMmaTile(dout, dO, base, row, length, d, ldt, lane);
  __syncwarp();

  // S = Q Kᵀ and dP = dO Vᵀ.
  Tile s_acc, dp_acc;
  wmma::fill_fragment(s_acc, 0.f);
  wmma::fill_fragment(dp_acc, 0.f);
  for (int k0 = 0; k0 < dp; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
    wmma::load_matrix_sync(a, Q + k0, ldt);
    wmma::load_matrix_sync(b, K + k0, ldt);
    wmma::mma_sync(s_acc, a, b, s_acc);
    wmma::load_matrix_sync(a, dO + k0, ldt);
    wmma::load_matrix_sync(b, V + k0, ldt);
    wmma::mma_sync(dp_acc, a, b, dp_acc);
  }
  wmma::store_matrix_sync(S, s_acc, kMmaRows, wmma::mem_row_major);
  wmma::store_matrix_sync(dP, dp_acc, kMmaRows, wmma::mem_row_major);
  __syncwarp();

  // P from the saved log-sum-exp, D_i = Σ_j P_ij dP_ij, dS = P (dP − D); zero outside L × L.
  const int i = lane / 2, first = (lane % 2) * 8;
  const float row_lse = i < length ? lse[pair * length + i] : 0.f;
  float p[8], g[8], partial = 0.f;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    const int j = first + t;
    p[t] = i < length && j < length ? expf(S[i * kMmaRows + j] * scale - row_lse) : 0.f;
    g[t] = dP[i * kMmaRows + j];
    partial += p[t] * g[t];
  }
  const float D = partial + __shfl_xor_sync(0xffffffffu, partial, 1);
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    P[i * kMmaRows + first + t] = Store<T>(p[t]);
    dS[i * kMmaRows + first + t] = Store<T>(p[t] * (g[t] - D));
  }
  __syncwarp();

  // dQ = dS K · scale, dK = dSᵀ Q · scale, dV = Pᵀ dO; 16 columns at a time through S.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> ds;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> ds_t, p_t;
  wmma::load_matrix_sync(ds, dS, kMmaRows);
  wmma::load_matrix_sync(ds_t, dS, kMmaRows);
  wmma::load_matrix_sync(p_t, P, kMmaRows);
  Tile acc;
  auto emit = [&](T* dst, int64_t dst_base, int64_t dst_row, int n0, float factor) {
    __syncwarp();  // the previous block's readers are done with S
    wmma::store_matrix_sync(S, acc, kMmaRows, wmma::mem_row_major);
    __syncwarp();
    StoreMmaTile(dst, S, dst_base, dst_row, n0, length, d, lane, factor);
  };
  for (int n0 = 0; n0 < dp; n0 += 16) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
    wmma::load_matrix_sync(b, K + n0, ldt);
    wmma::fill_fragment(acc, 0.f);
    wmma::mma_sync(acc, ds, b, acc);
    emit(dq, in_base, stride, n0, scale);
    wmma::load_matrix_sync(b, Q + n0, ldt);
    wmma::fill_fragment(acc, 0.f);
    wmma::mma_sync(acc, ds_t, b, acc);
    emit(dk, in_base, stride, n0, scale);
    wmma::load_matrix_sync(b, dO + n0, ldt);
    wmma::fill_fragment(acc, 0.f);
    wmma::mma_sync(acc, p_t, b, acc);
    emit(dv, in_base, stride, n0, 1.f);
  }
#endif
}

// out[b, j, i] = in[b, i, j] (+ add[b, j, i]): 32 × 32 tiles through shared memory, so that
// both the reads and the writes are row-contiguous.
constexpr int kTile = 32, kTileRows = 8;

template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    TransposeKernel(const T* in, const T* add, T* out, int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t offset = static_cast<int64_t>(blockIdx.z) * rows * cols;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = Load(in[offset + r * cols + c]);
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (c < cols && r < rows) {
      const int64_t o = offset + c * rows + r;
      const float value = tile[threadIdx.x][k];
      out[o] = Store<T>(add ? value + Load(add[o]) : value);
    }
  }
}

// The widest vector (≤ 16 bytes) that divides `extent` and that every pointer is aligned to.
template <typename T>
int VectorWidth(int64_t extent, std::initializer_list<const void*> pointers) {
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2) {
    bool ok = extent % v == 0;
    for (const void* p : pointers) ok = ok && reinterpret_cast<uintptr_t>(p) % (v * sizeof(T)) == 0;
    if (ok) return v;
  }
  return 1;
}

// launch(std::integral_constant<int, V>{}) for V = `width` (8, 4, 2 or 1): the kernels'
// vector width is a template argument.
template <typename Launch>
void WithVectorWidth(int width, Launch&& launch) {
  switch (width) {
    case 8:
      launch(std::integral_constant<int, 8>{});
      break;
    case 4:
      launch(std::integral_constant<int, 4>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    default:
      launch(std::integral_constant<int, 1>{});
  }
}

template <typename T>
struct TypeTag {
  using type = T;
};

// launch(TypeTag<T>{}) for the storage type T of `dtype`; returns its result (a cudaError_t).
template <typename Launch>
int WithDType(DType dtype, Launch&& launch) {
  switch (dtype) {
    case DType::kFloat32:
      return launch(TypeTag<float>{});
    case DType::kBFloat16:
      return launch(TypeTag<__nv_bfloat16>{});
    case DType::kFloat16:
      return launch(TypeTag<__half>{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

unsigned ElementwiseBlocks(int64_t vectors) {
  return static_cast<unsigned>(std::min<int64_t>((vectors + kThreads - 1) / kThreads, 1 << 20));
}

// Dynamic shared memory above the default 48 KB needs the kernel's consent (long sequences with
// wide heads; the motion modules' 16 × 40 … 16 × 160 stay far below).
template <typename Kernel>
int AllowSharedMemory(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return 0;
  return static_cast<int>(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes)));
}

bool ShortAttentionFits(int64_t length, int64_t head_dim) {
  return length >= 1 && length <= kShortAttentionMaxLength && head_dim >= 1 &&
         head_dim <= kShortAttentionMaxHeadDim;
}

// The warp kernels read and write 4 elements at a time: d and the rows' stride divisible by 4,
// pointers aligned.
template <typename T>
bool WarpAttentionFits(int d, int64_t stride, std::initializer_list<const void*> pointers) {
  bool ok = d % 4 == 0 && stride % 4 == 0;
  for (const void* p : pointers) ok = ok && reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T)) == 0;
  return ok;
}

// Up to kWarpAttentionMaxWarps warps per block within the default 48 KB of shared memory (no
// attribute to set, inside a CUDA graph's capture too), at least one.
int WarpsPerBlock(size_t bytes_per_warp) {
  const int fit = static_cast<int>(48 * 1024 / bytes_per_warp);
  return std::max(1, std::min(kWarpAttentionMaxWarps, fit));
}

// The tensor-core kernels' bf16 fragments need compute capability 8.0 (A100, H100/H200).
bool TensorCoresForAttention() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  return major >= 8;
}

unsigned WarpBlocks(int64_t pairs, int warps) {
  return static_cast<unsigned>((pairs + warps - 1) / warps);
}

// launch(std::integral_constant<int, kCols>{}) with kCols ≥ the key columns one lane owns
// (⌈L / split⌉): 2 for L ≤ 8, 8 for L ≤ 16, 32 above.
template <typename Launch>
int WithColumns(const WarpAttentionShape& s, Launch&& launch) {
  const int cols = (s.length + s.split - 1) / s.split;
  if (cols <= 2) return launch(std::integral_constant<int, 2>{});
  if (cols <= 8) return launch(std::integral_constant<int, 8>{});
  return launch(std::integral_constant<int, 32>{});
}

}  // namespace

int GroupNormSiluForward(DType dtype, const void* x, const void* gamma, const void* beta, void* y,
                         float* mean, float* rstd, int64_t n, int64_t c, int64_t hw, int64_t groups,
                         float eps, bool silu, void* stream) {
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    WithVectorWidth(VectorWidth<T>(hw, {x, y}), [&](auto v) {
      auto kernel = silu ? GroupNormSiluForwardKernel<T, decltype(v)::value, true>
                         : GroupNormSiluForwardKernel<T, decltype(v)::value, false>;
      kernel<<<static_cast<unsigned>(n * groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
          static_cast<T*>(y), mean, rstd, c, hw, groups, eps);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int GroupNormSiluBackward(DType dtype, const void* dy, const void* x, const float* mean,
                          const float* rstd, const void* gamma, const void* beta, void* dx,
                          int64_t n, int64_t c, int64_t hw, int64_t groups, bool silu,
                          void* stream) {
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    WithVectorWidth(VectorWidth<T>(hw, {dy, x, dx}), [&](auto v) {
      auto kernel = silu ? GroupNormSiluBackwardKernel<T, decltype(v)::value, true>
                         : GroupNormSiluBackwardKernel<T, decltype(v)::value, false>;
      kernel<<<static_cast<unsigned>(n * groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
          static_cast<const T*>(gamma), static_cast<const T*>(beta), static_cast<T*>(dx), c, hw,
          groups);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int GegluForward(DType dtype, const void* h, void* out, int64_t rows, int64_t e, void* stream) {
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int width = VectorWidth<T>(e, {h, out});
    WithVectorWidth(width, [&](auto v) {
      GegluForwardKernel<T, decltype(v)::value>
          <<<ElementwiseBlocks(rows * e / width), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(h), static_cast<T*>(out), rows, e);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int GegluBackward(DType dtype, const void* dout, const void* h, void* dh, int64_t rows, int64_t e,
                  void* stream) {
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int width = VectorWidth<T>(e, {dout, h, dh});
    WithVectorWidth(width, [&](auto v) {
      GegluBackwardKernel<T, decltype(v)::value>
          <<<ElementwiseBlocks(rows * e / width), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(dout), static_cast<const T*>(h), static_cast<T*>(dh), rows, e);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int ShortAttentionForward(DType dtype, const void* q, const void* k, const void* v, void* out,
                          float* lse, int64_t n, int64_t length, int64_t heads, int64_t head_dim,
                          int64_t stride, float scale, void* stream) {
  if (!ShortAttentionFits(length, head_dim)) return static_cast<int>(cudaErrorInvalidValue);
  const int L = static_cast<int>(length), D = static_cast<int>(head_dim);
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    if constexpr (!std::is_same_v<T, float>) {
      if (L <= kMmaRows && TensorCoresForAttention() &&
          WarpAttentionFits<T>(D, stride, {q, k, v, out})) {
        const size_t per_warp = MmaWarpBytes(D, 3, 1);
        const int warps = WarpsPerBlock(per_warp);
        const size_t bytes = per_warp * warps;
        if (int e = AllowSharedMemory(MmaAttentionForwardKernel<T>, bytes)) return e;
        MmaAttentionForwardKernel<T>
            <<<WarpBlocks(n * heads, warps), 32 * warps, bytes, cuda_stream>>>(
                static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                static_cast<T*>(out), lse, n * heads, static_cast<int>(heads), L, D, stride, scale);
        return static_cast<int>(cudaGetLastError());
      }
    }
    if (WarpAttentionFits<T>(D, stride, {q, k, v, out})) {
      const auto shape = MakeWarpAttentionShape(L, D);
      const size_t per_warp = sizeof(float) * WarpAttentionFloats(shape, 3, 1);
      const int warps = WarpsPerBlock(per_warp);
      const size_t bytes = per_warp * warps;
      return WithColumns(shape, [&](auto cols) {
        auto kernel = WarpAttentionForwardKernel<T, decltype(cols)::value>;
        if (int e = AllowSharedMemory(kernel, bytes)) return e;
        kernel<<<WarpBlocks(n * heads, warps), 32 * warps, bytes, cuda_stream>>>(
            static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
            static_cast<T*>(out), lse, n * heads, static_cast<int>(heads), shape, stride, scale);
        return static_cast<int>(cudaGetLastError());
      });
    }
    const size_t bytes = sizeof(float) * (3 * L * (D + 1) + L * (L + 1));
    if (int e = AllowSharedMemory(ShortAttentionForwardKernel<T>, bytes)) return e;
    ShortAttentionForwardKernel<T>
        <<<static_cast<unsigned>(n * heads), kAttentionThreads, bytes, cuda_stream>>>(
            static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
            static_cast<T*>(out), lse, L, static_cast<int>(heads), D, stride, scale);
    return static_cast<int>(cudaGetLastError());
  });
}

int ShortAttentionBackward(DType dtype, const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, void* dq, void* dk, void* dv, int64_t n,
                           int64_t length, int64_t heads, int64_t head_dim, int64_t stride,
                           float scale, void* stream) {
  if (!ShortAttentionFits(length, head_dim)) return static_cast<int>(cudaErrorInvalidValue);
  const int L = static_cast<int>(length), D = static_cast<int>(head_dim);
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    if constexpr (!std::is_same_v<T, float>) {
      if (L <= kMmaRows && TensorCoresForAttention() &&
          WarpAttentionFits<T>(D, stride, {dout, q, k, v, dq, dk, dv})) {
        const size_t per_warp = MmaWarpBytes(D, 4, 2);
        const int warps = WarpsPerBlock(per_warp);
        const size_t bytes = per_warp * warps;
        if (int e = AllowSharedMemory(MmaAttentionBackwardKernel<T>, bytes)) return e;
        MmaAttentionBackwardKernel<T>
            <<<WarpBlocks(n * heads, warps), 32 * warps, bytes, cuda_stream>>>(
                static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
                static_cast<const T*>(v), lse, static_cast<T*>(dq), static_cast<T*>(dk),
                static_cast<T*>(dv), n * heads, static_cast<int>(heads), L, D, stride, scale);
        return static_cast<int>(cudaGetLastError());
      }
    }
    if (WarpAttentionFits<T>(D, stride, {dout, q, k, v, dq, dk, dv})) {
      const auto shape = MakeWarpAttentionShape(L, D);
      const size_t per_warp = sizeof(float) * WarpAttentionFloats(shape, 4, 2);
      const int warps = WarpsPerBlock(per_warp);
      const size_t bytes = per_warp * warps;
      return WithColumns(shape, [&](auto cols) {
        auto kernel = WarpAttentionBackwardKernel<T, decltype(cols)::value>;
        if (int e = AllowSharedMemory(kernel, bytes)) return e;
        kernel<<<WarpBlocks(n * heads, warps), 32 * warps, bytes, cuda_stream>>>(
            static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
            static_cast<const T*>(v), lse, static_cast<T*>(dq), static_cast<T*>(dk),
            static_cast<T*>(dv), n * heads, static_cast<int>(heads), shape, stride, scale);
        return static_cast<int>(cudaGetLastError());
      });
    }
    const size_t bytes = sizeof(float) * (4 * L * (D + 1) + 2 * L * (L + 1) + L);
    if (int e = AllowSharedMemory(ShortAttentionBackwardKernel<T>, bytes)) return e;
    ShortAttentionBackwardKernel<T>
        <<<static_cast<unsigned>(n * heads), kAttentionThreads, bytes, cuda_stream>>>(
            static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
            static_cast<const T*>(v), lse, static_cast<T*>(dq), static_cast<T*>(dk),
            static_cast<T*>(dv), L, static_cast<int>(heads), D, stride, scale);
    return static_cast<int>(cudaGetLastError());
  });
}

int BatchedTranspose(DType dtype, const void* in, const void* add, void* out, int64_t batch,
                     int64_t rows, int64_t cols, void* stream) {
  const int64_t grid_y = (rows + kTile - 1) / kTile, grid_x = (cols + kTile - 1) / kTile;
  if (batch < 1 || batch > 65535 || grid_y > 65535 || grid_x > (int64_t{1} << 31) - 1) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
                    static_cast<unsigned>(batch));
    TransposeKernel<T><<<grid, dim3(kTile, kTileRows), 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(in), static_cast<const T*>(add), static_cast<T*>(out), rows, cols);
    return static_cast<int>(cudaGetLastError());
  });
}

const char* FusedCudaErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace adctl::fused_cuda

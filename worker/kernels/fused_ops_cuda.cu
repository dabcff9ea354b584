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

// γ's and β's gradients of GroupNorm (+ SiLU), per sample: one warp per (sample, channel) row
// of hw elements sums dz · x̂ and dz (dz = dy, or dy · SiLU'(z) with z = x̂ · γ + β) into
// out[sample] ([2, c]; the caller sums the samples').
template <typename T, int V, bool Silu>
__global__ void __launch_bounds__(kThreads)
    GroupNormAffineGradKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                              const T* gamma, const T* beta, float* out, int64_t n, int64_t c,
                              int64_t hw, int64_t groups) {
  using VecT = Vec<T, V>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= n * c) return;
  const int64_t sample = row / c, channel = row % c;
  const int64_t group = sample * groups + channel / (c / groups);
  const float mu = mean[group], r = rstd[group];
  const float gm = gamma ? Load(gamma[channel]) : 1.f, bt = beta ? Load(beta[channel]) : 0.f;
  const VecT* xr = reinterpret_cast<const VecT*>(x + row * hw);
  const VecT* dyr = reinterpret_cast<const VecT*>(dy + row * hw);
  float sum_gx = 0.f, sum_g = 0.f;
  for (int64_t i = lane; i < hw / V; i += 32) {
    const VecT xv = xr[i], dv = dyr[i];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float xhat = (Load(xv.v[k]) - mu) * r;
      float d = Load(dv.v[k]);
      if (Silu) {
        const float z = xhat * gm + bt, sg = Sigmoid(z);
        d *= sg * (1.f + z * (1.f - sg));
      }
      sum_gx += d * xhat;
      sum_g += d;
    }
  }
  sum_gx = WarpSum(sum_gx);
  sum_g = WarpSum(sum_g);
  if (lane == 0) {
    out[(sample * 2) * c + channel] = sum_gx;
    out[(sample * 2 + 1) * c + channel] = sum_g;
  }
}

// GroupNorm (+ SiLU) on channels-last x: sample `blockIdx.y` is s rows of c channels
// ([n, s, c]; NHWC with s = H·W, a motion module's clip [B, F·H·W, C]). A group's elements are
// cg = c / groups adjacent channels of every row, so the work goes by columns: thread x of a
// block owns the V channels x·V … (V divides cg: one group), rows threadIdx.y, + blockDim.y, …
// of the block's chunk of rows; its loads of a row are the warp's contiguous bytes. Each
// direction is two kernels: per-chunk sums of each group ([n, chunks, groups, 2] `partial`),
// then the element-wise pass, whose blocks first merge their sample's chunks. The forward's sums
// are of x − K, K the group's first element (shifted data: the variance does not cancel away
// when the mean is large against the spread). The backward adds `dres` (a residual's gradient
// of the same x, rows `dres_pitch` elements apart; may be null) to dx.
constexpr int kChannelsLastThreads = 512;

struct ChannelsLastShape {
  int64_t s, c, groups, rows_per_chunk;
  int chunks;
};

// The sums of a thread's two accumulators over the threads of each group, into
// partial[sample, chunk, group, 0 … 1]. `shared`: 2 · blockDim.x · blockDim.y floats.
__device__ void GroupSums(float a, float b, float* shared, float* partial,
                          const ChannelsLastShape& sh, int per_group) {
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
  shared[tid] = a;
  shared[threads + tid] = b;
  __syncthreads();
  if (tid < sh.groups) {
    float sa = 0.f, sb = 0.f;
    for (int y = 0; y < blockDim.y; ++y) {
      for (int j = 0; j < per_group; ++j) {
        const int idx = y * blockDim.x + tid * per_group + j;
        sa += shared[idx];
        sb += shared[threads + idx];
      }
    }
    float* out =
        partial +
        ((blockIdx.y * static_cast<int64_t>(sh.chunks) + blockIdx.x) * sh.groups + tid) * 2;
    out[0] = sa;
    out[1] = sb;
  }
}

// This sample's groups' sums over all chunks, in `merged` (2 · groups floats: [a…], [b…]), for
// every thread of the block.
__device__ void MergeChunks(const float* partial, float* merged, const ChannelsLastShape& sh) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  if (tid < sh.groups) {
    const float* p =
        partial + blockIdx.y * static_cast<int64_t>(sh.chunks) * sh.groups * 2 + tid * 2;
    float a = 0.f, b = 0.f;
    for (int k = 0; k < sh.chunks; ++k) {
      a += p[k * sh.groups * 2];
      b += p[k * sh.groups * 2 + 1];
    }
    merged[tid] = a;
    merged[sh.groups + tid] = b;
  }
  __syncthreads();
}

__device__ __forceinline__ int64_t ChunkEnd(const ChannelsLastShape& sh) {
  const int64_t end = (blockIdx.x + 1) * sh.rows_per_chunk;
  return end < sh.s ? end : sh.s;
}

template <typename T, int V>
__global__ void __launch_bounds__(kChannelsLastThreads)
    GroupNormChannelsLastStatsKernel(const T* x, float* partial, ChannelsLastShape sh) {
  extern __shared__ float shared[];
  using VecT = Vec<T, V>;
  const int64_t cg = sh.c / sh.groups;
  const int col = threadIdx.x;
  const T* xs = x + blockIdx.y * sh.s * sh.c;
  const float shift = Load(xs[col * V / cg * cg]);
  float s1 = 0.f, s2 = 0.f;
  const int64_t end = ChunkEnd(sh);
#pragma unroll 4
  for (int64_t r = blockIdx.x * sh.rows_per_chunk + threadIdx.y; r < end; r += blockDim.y) {
    const VecT in = reinterpret_cast<const VecT*>(xs + r * sh.c)[col];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float d = Load(in.v[k]) - shift;
      s1 += d;
      s2 += d * d;
    }
  }
  GroupSums(s1, s2, shared, partial, sh, static_cast<int>(cg / V));
}

template <typename T, int V, bool Silu>
__global__ void __launch_bounds__(kChannelsLastThreads)
    GroupNormChannelsLastForwardKernel(const T* x, const T* gamma, const T* beta, T* y,
                                       const float* partial, float* mean_out, float* rstd_out,
                                       ChannelsLastShape sh, float eps) {
  extern __shared__ float merged[];
  using VecT = Vec<T, V>;
  const int64_t cg = sh.c / sh.groups;
  const int64_t base = blockIdx.y * sh.s * sh.c;
  MergeChunks(partial, merged, sh);
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  float group_mean = 0.f, group_rstd = 0.f;
  if (tid < sh.groups) {
    const float count = static_cast<float>(sh.s * cg);
    const float m1 = merged[tid] / count;
    const float var = fmaxf(merged[sh.groups + tid] / count - m1 * m1, 0.f);
    group_mean = Load(x[base + tid * cg]) + m1;
    group_rstd = rsqrtf(var + eps);
  }
  __syncthreads();  // every thread has read the sums before they are overwritten
  if (tid < sh.groups) {
    merged[tid] = group_mean;
    merged[sh.groups + tid] = group_rstd;
    if (blockIdx.x == 0) {
      mean_out[blockIdx.y * sh.groups + tid] = group_mean;
      rstd_out[blockIdx.y * sh.groups + tid] = group_rstd;
    }
  }
  __syncthreads();
  const int col = threadIdx.x, group = static_cast<int>(col * V / cg);
  const float mean = merged[group], rstd = merged[sh.groups + group];
  float scale[V], shift[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t channel = col * V + k;
    scale[k] = rstd * (gamma ? Load(gamma[channel]) : 1.f);
    shift[k] = (beta ? Load(beta[channel]) : 0.f) - mean * scale[k];
  }
  const int64_t end = ChunkEnd(sh);
#pragma unroll 4
  for (int64_t r = blockIdx.x * sh.rows_per_chunk + threadIdx.y; r < end; r += blockDim.y) {
    const VecT in = reinterpret_cast<const VecT*>(x + base + r * sh.c)[col];
    VecT out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float z = Load(in.v[k]) * scale[k] + shift[k];
      out.v[k] = Store<T>(Silu ? z * Sigmoid(z) : z);
    }
    reinterpret_cast<VecT*>(y + base + r * sh.c)[col] = out;
  }
}

// The backward's per-element quantities: x̂, dz (dy through the SiLU) and g = dz · γ.
template <bool Silu>
__device__ __forceinline__ void GroupNormGrad(float xv, float dyv, float mu, float r, float gm,
                                              float bt, float* xhat, float* dz, float* g) {
  *xhat = (xv - mu) * r;
  *dz = dyv;
  if (Silu) {
    const float z = *xhat * gm + bt, sg = Sigmoid(z);
    *dz = dyv * sg * (1.f + z * (1.f - sg));
  }
  *g = *dz * gm;
}

// γ and β of a thread's V channels (1 and 0 where absent).
template <typename T, int V>
__device__ __forceinline__ void ColumnAffine(const T* gamma, const T* beta, int col, float* gm,
                                             float* bt) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    gm[k] = gamma ? Load(gamma[col * V + k]) : 1.f;
    bt[k] = beta ? Load(beta[col * V + k]) : 0.f;
  }
}

// Per chunk: the groups' Σ g and Σ g · x̂ into partial, and with Affine each channel's Σ dz · x̂
// and Σ dz into affine[sample · chunks + chunk] ([2, c]).
template <typename T, int V, bool Silu, bool Affine>
__global__ void __launch_bounds__(kChannelsLastThreads)
    GroupNormChannelsLastGradStatsKernel(const T* dy, const T* x, const float* mean,
                                         const float* rstd, const T* gamma, const T* beta,
                                         float* partial, float* affine, ChannelsLastShape sh) {
  extern __shared__ float shared[];
  using VecT = Vec<T, V>;
  const int64_t cg = sh.c / sh.groups;
  const int col = threadIdx.x;
  const int64_t base = blockIdx.y * sh.s * sh.c;
  const int64_t group = blockIdx.y * sh.groups + col * V / cg;
  const float mu = mean[group], rs = rstd[group];
  float gm[V], bt[V], aff_gx[V], aff_g[V];
  ColumnAffine<T, V>(gamma, beta, col, gm, bt);
#pragma unroll
  for (int k = 0; k < V; ++k) aff_gx[k] = aff_g[k] = 0.f;
  float sum_g = 0.f, sum_gx = 0.f;
  const int64_t end = ChunkEnd(sh);
#pragma unroll 4
  for (int64_t r = blockIdx.x * sh.rows_per_chunk + threadIdx.y; r < end; r += blockDim.y) {
    const VecT xv = reinterpret_cast<const VecT*>(x + base + r * sh.c)[col];
    const VecT dv = reinterpret_cast<const VecT*>(dy + base + r * sh.c)[col];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float xhat, dz, g;
      GroupNormGrad<Silu>(Load(xv.v[k]), Load(dv.v[k]), mu, rs, gm[k], bt[k], &xhat, &dz, &g);
      sum_g += g;
      sum_gx += g * xhat;
      if (Affine) {
        aff_gx[k] += dz * xhat;
        aff_g[k] += dz;
      }
    }
  }
  GroupSums(sum_g, sum_gx, shared, partial, sh, static_cast<int>(cg / V));
  if (!Affine) return;
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
  float* out = affine + (blockIdx.y * static_cast<int64_t>(sh.chunks) + blockIdx.x) * 2 * sh.c;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    __syncthreads();  // the previous readers of `shared` are done
    shared[tid] = aff_gx[k];
    shared[threads + tid] = aff_g[k];
    __syncthreads();
    if (threadIdx.y == 0) {
      float a = 0.f, b = 0.f;
      for (int y = 0; y < blockDim.y; ++y) {
        a += shared[y * blockDim.x + col];
        b += shared[threads + y * blockDim.x + col];
      }
      out[col * V + k] = a;
      out[sh.c + col * V + k] = b;
    }
  }
}

// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) (+ dres), the means over the group from the merged
// chunks.
template <typename T, int V, bool Silu>
__global__ void __launch_bounds__(kChannelsLastThreads)
    GroupNormChannelsLastBackwardKernel(const T* dy, const T* x, const float* mean,
                                        const float* rstd, const T* gamma, const T* beta,
                                        const float* partial, const T* dres, int64_t dres_pitch,
                                        T* dx, ChannelsLastShape sh) {
  extern __shared__ float merged[];
  using VecT = Vec<T, V>;
  const int64_t cg = sh.c / sh.groups;
  MergeChunks(partial, merged, sh);
  const int col = threadIdx.x;
  const int local = static_cast<int>(col * V / cg);
  const int64_t base = blockIdx.y * sh.s * sh.c;
  const int64_t group = blockIdx.y * sh.groups + local;
  const float mu = mean[group], rs = rstd[group];
  const float count = static_cast<float>(sh.s * cg);
  const float mean_g = merged[local] / count, mean_gx = merged[sh.groups + local] / count;
  float gm[V], bt[V];
  ColumnAffine<T, V>(gamma, beta, col, gm, bt);
  const int64_t end = ChunkEnd(sh);
#pragma unroll 4
  for (int64_t r = blockIdx.x * sh.rows_per_chunk + threadIdx.y; r < end; r += blockDim.y) {
    const VecT xv = reinterpret_cast<const VecT*>(x + base + r * sh.c)[col];
    const VecT dv = reinterpret_cast<const VecT*>(dy + base + r * sh.c)[col];
    VecT res;
    if (dres) res = reinterpret_cast<const VecT*>(dres + (blockIdx.y * sh.s + r) * dres_pitch)[col];
    VecT out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float xhat, dz, g;
      GroupNormGrad<Silu>(Load(xv.v[k]), Load(dv.v[k]), mu, rs, gm[k], bt[k], &xhat, &dz, &g);
      const float o = rs * (g - mean_g - xhat * mean_gx);
      out.v[k] = Store<T>(dres ? o + Load(res.v[k]) : o);
    }
    reinterpret_cast<VecT*>(dx + base + r * sh.c)[col] = out;
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

// out = a (+ b) + bias[sample's bias row] over [n, s, c] in vectors of V, grid-stride; the sum
// in fp32, rounded once.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    AddChannelBiasKernel(const T* a, const T* b, const float* bias, T* out, int64_t s, int64_t c,
                         int64_t samples_per_bias_row, int64_t total) {
  using VecT = Vec<T, V>;
  const int64_t per_row = c / V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / per_row, col = i % per_row;
    const float* bias_v = bias + row / s / samples_per_bias_row * c + col * V;
    const VecT av = reinterpret_cast<const VecT*>(a)[i];
    VecT bv;
    if (b) bv = reinterpret_cast<const VecT*>(b)[i];
    VecT o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float sum = Load(av.v[k]) + bias_v[k];
      if (b) sum += Load(bv.v[k]);
      o.v[k] = Store<T>(sum);
    }
    reinterpret_cast<VecT*>(out)[i] = o;
  }
}

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

// Short attention on tensor cores (bf16/fp16, L ≤ 16: the motion modules' 16 frames): one warp
// per (sequence, head) multiplies 16 × 16 tiles with WMMA, so the work is the loads and stores.
// Rows are padded to 16 with zeros (keys past L masked out of the softmax, queries past L not
// stored), columns to a multiple of 16 (+ 8 elements of row padding against bank conflicts). P
// and dS enter the second products in the input's 16-bit type, as in flash attention; the
// scores, the softmax and every accumulator are fp32. The tiles come in by asynchronous copies
// (cp.async: all of a warp's loads in flight at once), and each output goes back through the
// shared tile its product has finished reading, in whole rows of kChunk elements (16 bytes where
// the head dimension and strides allow, else 8).
constexpr int kMmaRows = 16;

__host__ __device__ inline int MmaRowElements(int d) { return (d + 15) / 16 * 16 + 8; }

// Bytes of shared memory per warp: `tiles` [16, ldt] 16-bit tiles and `squares` pairs of a
// 16 × 16 fp32 and a 16 × 16 16-bit square.
__host__ __device__ inline int MmaWarpBytes(int d, int tiles, int squares) {
  return tiles * kMmaRows * MmaRowElements(d) * 2 + squares * kMmaRows * kMmaRows * (4 + 2);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define ADCTL_MMA_ATTENTION 1
#endif

// kBytes (8 or 16) from global to shared memory without passing through registers; zeros where
// !valid (the copy reads nothing then). Completed by WaitCopies.
template <int kBytes>
__device__ __forceinline__ void CopyAsync(void* dst, const void* src, bool valid) {
#ifdef ADCTL_MMA_ATTENTION
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(kBytes),
                 "r"(n));
  }
#endif
}

__device__ __forceinline__ void WaitCopies() {
#ifdef ADCTL_MMA_ATTENTION
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Rows 0 … 15 of a (sequence, head) slice into a [16, ldt] tile, zeros past `length` rows and
// `d` columns (d a multiple of kChunk).
template <typename T, int kChunk>
__device__ void LoadMmaTile(const T* src, T* dst, int64_t base, int64_t stride, int length, int d,
                            int ldt, int lane) {
  const int chunks = (ldt - 8) / kChunk;
  for (int idx = lane; idx < kMmaRows * chunks; idx += 32) {
    const int i = idx / chunks, c = idx % chunks * kChunk;
    const bool valid = i < length && c < d;
    CopyAsync<kChunk * sizeof(T)>(dst + i * ldt + c, valid ? src + base + i * stride + c : src,
                                  valid);
  }
}

// The first `length` rows and `d` columns of a [16, ldt] tile to global rows `row` elements
// apart, kChunk elements a store.
template <typename T, int kChunk>
__device__ void StoreMmaTile(const T* tile, T* dst, int64_t base, int64_t row, int length, int d,
                             int ldt, int lane) {
  const int chunks = d / kChunk;
  for (int idx = lane; idx < length * chunks; idx += 32) {
    const int i = idx / chunks, c = idx % chunks * kChunk;
    *reinterpret_cast<Vec<T, kChunk>*>(dst + base + i * row + c) =
        *reinterpret_cast<const Vec<T, kChunk>*>(tile + i * ldt + c);
  }
}

#ifdef ADCTL_MMA_ATTENTION
using MmaAccumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// acc · scale into columns n0 … n0 + 15 of a [16, ldt] 16-bit tile through the fp32 square
// `stage`; the caller's previous use of `stage` must be a synced warp ago.
template <typename T>
__device__ void StageMmaBlock(const MmaAccumulator& acc, float* stage, T* tile, int ldt, int n0,
                              int lane, float scale) {
  nvcuda::wmma::store_matrix_sync(stage, acc, kMmaRows, nvcuda::wmma::mem_row_major);
  __syncwarp();
  const int i = lane / 2, first = (lane % 2) * 8;
  Vec<T, 8> v;
#pragma unroll
  for (int t = 0; t < 8; ++t) v.v[t] = Store<T>(stage[i * kMmaRows + first + t] * scale);
  *reinterpret_cast<Vec<T, 8>*>(tile + i * ldt + n0 + first) = v;
}

// acc = A Bᵀ over the padded head dimension, A and B [16, ldt] row-major tiles.
template <typename T>
__device__ void MmaScores(MmaAccumulator& acc, const T* a_tile, const T* b_tile, int ldt) {
  using namespace nvcuda;
  wmma::fill_fragment(acc, 0.f);
  for (int k0 = 0; k0 < ldt - 8; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;  // Bᵀ
    wmma::load_matrix_sync(a, a_tile + k0, ldt);
    wmma::load_matrix_sync(b, b_tile + k0, ldt);
    wmma::mma_sync(acc, a, b, acc);
  }
}
#endif

template <typename T, int kChunk>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    MmaAttentionForwardKernel(const T* q, const T* k, const T* v, T* out, float* lse, int64_t pairs,
                              int heads, int length, int d, int64_t stride, int64_t interleave,
                              float scale) {
#ifdef ADCTL_MMA_ATTENTION
  using namespace nvcuda;
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
  const PairRows at = RowsOf(pair, heads, length, d, stride, interleave);
  LoadMmaTile<T, kChunk>(q, Q, at.in_base, at.in_row, length, d, ldt, lane);
  LoadMmaTile<T, kChunk>(k, K, at.in_base, at.in_row, length, d, ldt, lane);
  LoadMmaTile<T, kChunk>(v, V, at.in_base, at.in_row, length, d, ldt, lane);
  WaitCopies();
  __syncwarp();

  MmaAccumulator acc;
  MmaScores(acc, Q, K, ldt);
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

  // out = P V, 16 columns at a time into Q's tile (free since the scores).
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p;
  wmma::load_matrix_sync(p, P, kMmaRows);
  for (int n0 = 0; n0 < dp; n0 += 16) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
    wmma::load_matrix_sync(b, V + n0, ldt);
    wmma::fill_fragment(acc, 0.f);
    wmma::mma_sync(acc, p, b, acc);
    __syncwarp();  // the previous block's readers are done with S
    StageMmaBlock(acc, S, Q, ldt, n0, lane, 1.f);
  }
  __syncwarp();
  StoreMmaTile<T, kChunk>(Q, out, at.base, at.row, length, d, ldt, lane);
#endif
}

template <typename T, int kChunk>
__global__ void __launch_bounds__(32 * kWarpAttentionMaxWarps)
    MmaAttentionBackwardKernel(const T* dout, const T* q, const T* k, const T* v, const float* lse,
                               T* dq, T* dk, T* dv, int64_t pairs, int heads, int length, int d,
                               int64_t stride, int64_t interleave, float scale) {
#ifdef ADCTL_MMA_ATTENTION
  using namespace nvcuda;
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
  const PairRows at = RowsOf(pair, heads, length, d, stride, interleave);
  LoadMmaTile<T, kChunk>(q, Q, at.in_base, at.in_row, length, d, ldt, lane);
  LoadMmaTile<T, kChunk>(k, K, at.in_base, at.in_row, length, d, ldt, lane);
  LoadMmaTile<T, kChunk>(v, V, at.in_base, at.in_row, length, d, ldt, lane);
  LoadMmaTile<T, kChunk>(dout, dO, at.base, at.row, length, d, ldt, lane);
  const int i = lane / 2, first = (lane % 2) * 8;
  const float row_lse = i < length ? lse[pair * length + i] : 0.f;
  WaitCopies();
  __syncwarp();

  // S = Q Kᵀ and dP = dO Vᵀ.
  MmaAccumulator s_acc, dp_acc;
  MmaScores(s_acc, Q, K, ldt);
  MmaScores(dp_acc, dO, V, ldt);
  wmma::store_matrix_sync(S, s_acc, kMmaRows, wmma::mem_row_major);
  wmma::store_matrix_sync(dP, dp_acc, kMmaRows, wmma::mem_row_major);
  __syncwarp();

  // P from the saved log-sum-exp, D_i = Σ_j P_ij dP_ij, dS = P (dP − D); zero outside L × L.
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

  // dQ = dS K · scale, dK = dSᵀ Q · scale, dV = Pᵀ dO, 16 columns at a time, each into the tile
  // its product has just read (dQ over K, dK over Q, dV over dO), staged through S and dP in
  // turn: a stage's store to a square follows the other square's sync.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> ds;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> ds_t, p_t;
  wmma::load_matrix_sync(ds, dS, kMmaRows);
  wmma::load_matrix_sync(ds_t, dS, kMmaRows);
  wmma::load_matrix_sync(p_t, P, kMmaRows);
  MmaAccumulator acc;
  float* stage[2] = {S, dP};
  int turn = 0;
  auto product = [&](const auto& a, T* tile, int n0, float factor) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
    wmma::load_matrix_sync(b, tile + n0, ldt);
    wmma::fill_fragment(acc, 0.f);
    wmma::mma_sync(acc, a, b, acc);
    StageMmaBlock(acc, stage[turn], tile, ldt, n0, lane, factor);
    turn ^= 1;
  };
  for (int n0 = 0; n0 < dp; n0 += 16) {
    product(ds, K, n0, scale);
    product(ds_t, Q, n0, scale);
    product(p_t, dO, n0, 1.f);
  }
  __syncwarp();
  StoreMmaTile<T, kChunk>(K, dq, at.in_base, at.in_row, length, d, ldt, lane);
  StoreMmaTile<T, kChunk>(Q, dk, at.in_base, at.in_row, length, d, ldt, lane);
  StoreMmaTile<T, kChunk>(dO, dv, at.in_base, at.in_row, length, d, ldt, lane);
#endif
}

// LayerNorm over rows of c elements, a warp per row (two rows at once for rows of up to 64
// vectors, so that a warp has as many bytes in flight as on wider rows): lane l holds the row's
// vectors it · 32 + l (it < kIters) in fp32 registers, so x is read once (c ≤ 32 · V · kIters).
// The mean, then the mean squared deviation from the registers (exact two-pass variance). `add`
// ([period, c], may be null) is added to the output, row r taking add's row (r / repeat) mod
// period: the motion modules' sinusoidal positions on [N, F, C] tokens (repeat 1) or on a
// channels-last clip's [B, F, H·W, C] rows (repeat H·W), added before the one rounding.
template <int kIters>
constexpr int kLayerNormRowsPerWarp = kIters <= 2 ? 2 : 1;

// The first of the kRows rows this warp takes.
template <int kRows>
__device__ __forceinline__ int64_t WarpFirstRow() {
  return (static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * kRows;
}

template <typename T, int V, int kIters>
__global__ void __launch_bounds__(kThreads)
    LayerNormForwardKernel(const T* x, const T* gamma, const T* beta, const T* add, int64_t period,
                           int64_t repeat, T* y, float* mean_out, float* rstd_out, int64_t rows,
                           int c, float eps) {
  using VecT = Vec<T, V>;
  constexpr int kRows = kLayerNormRowsPerWarp<kIters>;
  const int lane = threadIdx.x % 32;
  const int64_t first = WarpFirstRow<kRows>();
  if (first >= rows) return;
  const int vectors = c / V;
  float v[kRows][kIters][V];
  float mean[kRows], rstd[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const bool row_in = first + r < rows;
    const VecT* xr = reinterpret_cast<const VecT*>(x + (first + r) * c);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int idx = it * 32 + lane;
      VecT in;
      if (row_in && idx < vectors) in = xr[idx];
#pragma unroll
      for (int e = 0; e < V; ++e) v[r][it][e] = row_in && idx < vectors ? Load(in.v[e]) : 0.f;
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float sum = 0.f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
#pragma unroll
      for (int e = 0; e < V; ++e) sum += v[r][it][e];
    }
    mean[r] = WarpSum(sum) / c;
    float squares = 0.f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (it * 32 + lane >= vectors) break;
#pragma unroll
      for (int e = 0; e < V; ++e) squares += (v[r][it][e] - mean[r]) * (v[r][it][e] - mean[r]);
    }
    rstd[r] = rsqrtf(WarpSum(squares) / c + eps);
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = it * 32 + lane;
    if (idx >= vectors) break;
    VecT g, b;
    if (gamma) g = reinterpret_cast<const VecT*>(gamma)[idx];
    if (beta) b = reinterpret_cast<const VecT*>(beta)[idx];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first + r;
      if (row >= rows) break;
      VecT a, out;
      if (add) a = reinterpret_cast<const VecT*>(add + row / repeat % period * c)[idx];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float z = (v[r][it][e] - mean[r]) * rstd[r];
        if (gamma) z *= Load(g.v[e]);
        if (beta) z += Load(b.v[e]);
        if (add) z += Load(a.v[e]);
        out.v[e] = Store<T>(z);
      }
      reinterpret_cast<VecT*>(y + row * c)[idx] = out;
    }
  }
  if (lane < kRows && first + lane < rows) {
    mean_out[first + lane] = lane == 0 ? mean[0] : mean[kRows - 1];
    rstd_out[first + lane] = lane == 0 ? rstd[0] : rstd[kRows - 1];
  }
}

// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) (+ dres) with g = dy · γ, rows as in the forward.
template <typename T, int V, int kIters>
__global__ void __launch_bounds__(kThreads)
    LayerNormBackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                            const T* gamma, const T* dres, T* dx, int64_t rows, int c) {
  using VecT = Vec<T, V>;
  constexpr int kRows = kLayerNormRowsPerWarp<kIters>;
  const int lane = threadIdx.x % 32;
  const int64_t first = WarpFirstRow<kRows>();
  if (first >= rows) return;
  const int vectors = c / V;
  float xh[kRows][kIters][V], g[kRows][kIters][V];
  VecT res[kRows][kIters];  // dres, loaded with x and dy (packed: half the registers in bf16)
  float m[kRows], rs[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const bool row_in = first + r < rows;
    m[r] = row_in ? mean[first + r] : 0.f;
    rs[r] = row_in ? rstd[first + r] : 0.f;
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = it * 32 + lane;
    VecT gv;
    if (gamma && idx < vectors) gv = reinterpret_cast<const VecT*>(gamma)[idx];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool in = first + r < rows && idx < vectors;
      VecT xv, dv;
      if (in) {
        xv = reinterpret_cast<const VecT*>(x + (first + r) * c)[idx];
        dv = reinterpret_cast<const VecT*>(dy + (first + r) * c)[idx];
        if (dres) res[r][it] = reinterpret_cast<const VecT*>(dres + (first + r) * c)[idx];
      }
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float d = in ? Load(dv.v[e]) : 0.f;
        xh[r][it][e] = in ? (Load(xv.v[e]) - m[r]) * rs[r] : 0.f;
        g[r][it][e] = gamma && in ? d * Load(gv.v[e]) : d;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = first + r;
    if (row >= rows) break;
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        sum_g += g[r][it][e];
        sum_gx += g[r][it][e] * xh[r][it][e];
      }
    }
    const float mean_g = WarpSum(sum_g) / c, mean_gx = WarpSum(sum_gx) / c;
    VecT* dxr = reinterpret_cast<VecT*>(dx + row * c);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int idx = it * 32 + lane;
      if (idx >= vectors) break;
      VecT out;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float o = rs[r] * (g[r][it][e] - mean_g - xh[r][it][e] * mean_gx);
        out.v[e] = Store<T>(dres ? o + Load(res[r][it].v[e]) : o);
      }
      dxr[idx] = out;
    }
  }
}

// γ's and β's gradients Σ dy · x̂ and Σ dy over the rows, in pieces: block (column strip,
// row chunk) sums its rows of 32 · V columns (V = 2: a warp reads 128 contiguous bytes of a bf16
// row; V = 1 where c is odd), the block's 8 warps each a share of the chunk's rows, and writes
// partial[blockIdx.y] ([2, c]; zeros for a chunk past the rows); the caller sums the chunks'.
// With x null, Σ dy alone (a linear layer's bias gradient; the first row of each piece is zero).
constexpr int kGammaBetaColumns = 64;  // the widest strip (V = 2)

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    LayerNormGammaBetaKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                             float* partial, int64_t rows, int c, int64_t chunk_rows) {
  using VecT = Vec<T, V>;
  __shared__ float sums[2][kThreads / 32][kGammaBetaColumns];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int kStrip = 32 * V;
  const int col = blockIdx.x * kStrip + lane * V;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = min(rows, begin + chunk_rows);
  float acc_g[V] = {}, acc_b[V] = {};
  if (col < c) {
#pragma unroll 4
    for (int64_t row = begin + warp; row < end; row += kThreads / 32) {
      const VecT dv = *reinterpret_cast<const VecT*>(dy + row * c + col);
      if (x) {
        const VecT xv = *reinterpret_cast<const VecT*>(x + row * c + col);
        const float m = mean[row], r = rstd[row];
#pragma unroll
        for (int e = 0; e < V; ++e) acc_g[e] += Load(dv.v[e]) * (Load(xv.v[e]) - m) * r;
      }
#pragma unroll
      for (int e = 0; e < V; ++e) acc_b[e] += Load(dv.v[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    sums[0][warp][lane * V + e] = acc_g[e];
    sums[1][warp][lane * V + e] = acc_b[e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * kStrip; i += kThreads) {
    const int which = i / kStrip, j = i % kStrip;
    const int column = blockIdx.x * kStrip + j;
    if (column >= c) continue;
    float total = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) total += sums[which][w][j];
    partial[(static_cast<int64_t>(blockIdx.y) * 2 + which) * c + column] = total;
  }
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

// The same with 64 × 64 tiles, each thread moving two adjacent elements a load and a store (rows
// and cols even, pointers aligned to two elements): twice the bytes in flight a thread, whole
// 128-byte lines a warp for 16-bit types.
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    TransposePairsKernel(const T* in, const T* add, T* out, int64_t rows, int64_t cols) {
  constexpr int kWide = 2 * kTile;
  __shared__ float tile[kWide][kWide + 1];
  const int64_t offset = static_cast<int64_t>(blockIdx.z) * rows * cols;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kWide;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kWide;
  const int pair = 2 * threadIdx.x;
  for (int k = threadIdx.y; k < kWide; k += kTileRows) {
    const int64_t r = r0 + k, c = c0 + pair;
    if (r < rows && c < cols) {
      const auto v = *reinterpret_cast<const Vec<T, 2>*>(in + offset + r * cols + c);
      tile[k][pair] = Load(v.v[0]);
      tile[k][pair + 1] = Load(v.v[1]);
    }
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kWide; k += kTileRows) {
    const int64_t c = c0 + k, r = r0 + pair;
    if (c < cols && r < rows) {
      const int64_t o = offset + c * rows + r;
      float a = tile[pair][k], b = tile[pair + 1][k];
      if (add) {
        const auto extra = *reinterpret_cast<const Vec<T, 2>*>(add + o);
        a += Load(extra.v[0]);
        b += Load(extra.v[1]);
      }
      Vec<T, 2> w;
      w.v[0] = Store<T>(a);
      w.v[1] = Store<T>(b);
      *reinterpret_cast<Vec<T, 2>*>(out + o) = w;
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

// launch(std::integral_constant<int, kChunk>{}): the tensor-core kernels move rows 8 elements
// (16 bytes) at a time where the head dimension, the stride and every pointer allow, else 4
// (WarpAttentionFits).
template <typename Launch>
int WithMmaChunk(int d, int64_t stride, std::initializer_list<const void*> pointers,
                 Launch&& launch) {
  bool wide = d % 8 == 0 && stride % 8 == 0;
  for (const void* p : pointers) wide = wide && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (wide) return launch(std::integral_constant<int, 8>{});
  return launch(std::integral_constant<int, 4>{});
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

// launch(std::integral_constant<int, kIters>{}) for the register vectors per lane (1 … 4, 6 or
// 8) that hold a row of `vectors` vectors; cudaErrorInvalidValue above 8 · 32.
template <typename Launch>
int WithRowIters(int64_t vectors, Launch&& launch) {
  switch ((vectors + 31) / 32) {
    case 1:
      return launch(std::integral_constant<int, 1>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    case 3:
      return launch(std::integral_constant<int, 3>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    case 5:
    case 6:
      return launch(std::integral_constant<int, 6>{});
    case 7:
    case 8:
      return launch(std::integral_constant<int, 8>{});
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

// The LayerNorm kernels move 16 bytes a load where c and every pointer allow it, else one
// element (c ≤ 256 then).
template <typename T, typename Launch>
int WithRowVector(int64_t c, std::initializer_list<const void*> pointers, Launch&& launch) {
  constexpr int kWide = 16 / sizeof(T);
  if (VectorWidth<T>(c, pointers) == kWide) return launch(std::integral_constant<int, kWide>{});
  return launch(std::integral_constant<int, 1>{});
}

int MultiProcessors() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 1;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 1;
  }
  return std::max(1, count);
}

unsigned RowBlocks(int64_t rows, int rows_per_warp) {
  const int64_t per_block = kThreads / 32 * rows_per_warp;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

// Channels-last GroupNorm's launch geometry: blocks of (c / V columns) × (rows at once), up to
// 512 threads; about 1024 blocks in all (at most 128 chunks a sample, whose sums every block of
// the element-wise pass merges).
constexpr int64_t kChannelsLastMaxColumns = kChannelsLastThreads;

ChannelsLastShape MakeChannelsLastShape(int64_t n, int64_t s, int64_t c, int64_t groups) {
  const int64_t want = std::min<int64_t>(std::max<int64_t>(1024 / n, 1), 128);
  const int64_t chunks = std::min(want, s);
  const int64_t rows_per_chunk = (s + chunks - 1) / chunks;
  return {s, c, groups, rows_per_chunk,
          static_cast<int>((s + rows_per_chunk - 1) / rows_per_chunk)};
}

dim3 ChannelsLastBlock(int64_t columns) {
  return dim3(static_cast<unsigned>(columns),
              static_cast<unsigned>(std::max<int64_t>(1, kChannelsLastThreads / columns)));
}

size_t ReduceBytes(const dim3& block) { return 2 * block.x * block.y * sizeof(float); }

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

int GroupNormAffineBackward(DType dtype, const void* dy, const void* x, const float* mean,
                            const float* rstd, const void* gamma, const void* beta, float* out,
                            int64_t n, int64_t c, int64_t hw, int64_t groups, bool silu,
                            void* stream) {
  if (n < 1 || c < 1 || hw < 1 || groups < 1 || c % groups != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    WithVectorWidth(VectorWidth<T>(hw, {dy, x}), [&](auto v) {
      auto kernel = silu ? GroupNormAffineGradKernel<T, decltype(v)::value, true>
                         : GroupNormAffineGradKernel<T, decltype(v)::value, false>;
      kernel<<<RowBlocks(n * c, 1), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
          static_cast<const T*>(gamma), static_cast<const T*>(beta), out, n, c, hw, groups);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

bool GroupNormChannelsLastFits(DType dtype, int64_t c, int64_t groups) {
  if (c < 1 || groups < 1 || c % groups != 0) return false;
  int v = dtype == DType::kFloat32 ? 4 : 8;
  while ((c / groups) % v != 0) v /= 2;
  return c / v <= kChannelsLastMaxColumns;
}

int64_t GroupNormChannelsLastChunks(int64_t n, int64_t s) {
  const ChannelsLastShape sh = MakeChannelsLastShape(n, s, 1, 1);
  return sh.chunks;
}

int GroupNormChannelsLastForward(DType dtype, const void* x, const void* gamma, const void* beta,
                                 void* y, float* mean, float* rstd, float* partial, int64_t n,
                                 int64_t s, int64_t c, int64_t groups, float eps, bool silu,
                                 void* stream) {
  if (n < 1 || s < 1 || !GroupNormChannelsLastFits(dtype, c, groups) || n > 65535) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const ChannelsLastShape sh = MakeChannelsLastShape(n, s, c, groups);
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int width = VectorWidth<T>(c / groups, {x, y});
    if (c / width > kChannelsLastMaxColumns) return static_cast<int>(cudaErrorInvalidValue);
    WithVectorWidth(width, [&](auto v) {
      constexpr int V = decltype(v)::value;
      const dim3 grid(sh.chunks, static_cast<unsigned>(n)), block = ChannelsLastBlock(c / V);
      const auto st = static_cast<cudaStream_t>(stream);
      GroupNormChannelsLastStatsKernel<T, V>
          <<<grid, block, ReduceBytes(block), st>>>(static_cast<const T*>(x), partial, sh);
      auto kernel = silu ? GroupNormChannelsLastForwardKernel<T, V, true>
                         : GroupNormChannelsLastForwardKernel<T, V, false>;
      kernel<<<grid, block, 2 * groups * sizeof(float), st>>>(
          static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
          static_cast<T*>(y), partial, mean, rstd, sh, eps);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int GroupNormChannelsLastBackward(DType dtype, const void* dy, const void* x, const float* mean,
                                  const float* rstd, const void* gamma, const void* beta,
                                  const void* dres, int64_t dres_pitch, void* dx, float* partial,
                                  float* affine, int64_t n, int64_t s, int64_t c, int64_t groups,
                                  bool silu, void* stream) {
  if (n < 1 || s < 1 || !GroupNormChannelsLastFits(dtype, c, groups) || n > 65535) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const ChannelsLastShape sh = MakeChannelsLastShape(n, s, c, groups);
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // A residual gradient with its own row pitch (a channel slice of a wider map: the skip
    // connections' through their concatenation) takes what its pitch allows.
    int width = VectorWidth<T>(c / groups, {dy, x, dx, dres});
    while (dres && dres_pitch % width != 0) width /= 2;
    if (c / width > kChannelsLastMaxColumns) return static_cast<int>(cudaErrorInvalidValue);
    WithVectorWidth(width, [&](auto v) {
      constexpr int V = decltype(v)::value;
      const dim3 grid(sh.chunks, static_cast<unsigned>(n)), block = ChannelsLastBlock(c / V);
      const auto st = static_cast<cudaStream_t>(stream);
      auto stats = silu ? (affine ? GroupNormChannelsLastGradStatsKernel<T, V, true, true>
                                  : GroupNormChannelsLastGradStatsKernel<T, V, true, false>)
                        : (affine ? GroupNormChannelsLastGradStatsKernel<T, V, false, true>
                                  : GroupNormChannelsLastGradStatsKernel<T, V, false, false>);
      stats<<<grid, block, ReduceBytes(block), st>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
          static_cast<const T*>(gamma), static_cast<const T*>(beta), partial, affine, sh);
      auto kernel = silu ? GroupNormChannelsLastBackwardKernel<T, V, true>
                         : GroupNormChannelsLastBackwardKernel<T, V, false>;
      kernel<<<grid, block, 2 * groups * sizeof(float), st>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
          static_cast<const T*>(gamma), static_cast<const T*>(beta), partial,
          static_cast<const T*>(dres), dres_pitch, static_cast<T*>(dx), sh);
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

int AddChannelBias(DType dtype, const void* a, const void* b, const float* bias, void* out,
                   int64_t n, int64_t s, int64_t c, int64_t bias_rows, void* stream) {
  if (bias_rows < 1 || n % bias_rows != 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n * s * c == 0) return 0;
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int width = VectorWidth<T>(c, {a, b, out});
    WithVectorWidth(width, [&](auto v) {
      const int64_t vectors = n * s * c / width;
      AddChannelBiasKernel<T, decltype(v)::value>
          <<<ElementwiseBlocks(vectors), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(a), static_cast<const T*>(b), bias, static_cast<T*>(out), s, c,
              n / bias_rows, vectors);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int ShortAttentionForward(DType dtype, const void* q, const void* k, const void* v, void* out,
                          float* lse, int64_t n, int64_t length, int64_t heads, int64_t head_dim,
                          int64_t stride, int64_t interleave, float scale, void* stream) {
  if (!ShortAttentionFits(length, head_dim) || interleave < 1 || n % interleave != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
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
        return WithMmaChunk(D, stride, {q, k, v, out}, [&](auto chunk) {
          auto kernel = MmaAttentionForwardKernel<T, decltype(chunk)::value>;
          if (int e = AllowSharedMemory(kernel, bytes)) return e;
          kernel<<<WarpBlocks(n * heads, warps), 32 * warps, bytes, cuda_stream>>>(
              static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
              static_cast<T*>(out), lse, n * heads, static_cast<int>(heads), L, D, stride,
              interleave, scale);
          return static_cast<int>(cudaGetLastError());
        });
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
            static_cast<T*>(out), lse, n * heads, static_cast<int>(heads), shape, stride,
            interleave, scale);
        return static_cast<int>(cudaGetLastError());
      });
    }
    const size_t bytes = sizeof(float) * (3 * L * (D + 1) + L * (L + 1));
    if (int e = AllowSharedMemory(ShortAttentionForwardKernel<T>, bytes)) return e;
    ShortAttentionForwardKernel<T>
        <<<static_cast<unsigned>(n * heads), kAttentionThreads, bytes, cuda_stream>>>(
            static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
            static_cast<T*>(out), lse, L, static_cast<int>(heads), D, stride, interleave, scale);
    return static_cast<int>(cudaGetLastError());
  });
}

int ShortAttentionBackward(DType dtype, const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, void* dq, void* dk, void* dv, int64_t n,
                           int64_t length, int64_t heads, int64_t head_dim, int64_t stride,
                           int64_t interleave, float scale, void* stream) {
  if (!ShortAttentionFits(length, head_dim) || interleave < 1 || n % interleave != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
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
        return WithMmaChunk(D, stride, {dout, q, k, v, dq, dk, dv}, [&](auto chunk) {
          auto kernel = MmaAttentionBackwardKernel<T, decltype(chunk)::value>;
          if (int e = AllowSharedMemory(kernel, bytes)) return e;
          kernel<<<WarpBlocks(n * heads, warps), 32 * warps, bytes, cuda_stream>>>(
              static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
              static_cast<const T*>(v), lse, static_cast<T*>(dq), static_cast<T*>(dk),
              static_cast<T*>(dv), n * heads, static_cast<int>(heads), L, D, stride, interleave,
              scale);
          return static_cast<int>(cudaGetLastError());
        });
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
            static_cast<T*>(dv), n * heads, static_cast<int>(heads), shape, stride, interleave,
            scale);
        return static_cast<int>(cudaGetLastError());
      });
    }
    const size_t bytes = sizeof(float) * (4 * L * (D + 1) + 2 * L * (L + 1) + L);
    if (int e = AllowSharedMemory(ShortAttentionBackwardKernel<T>, bytes)) return e;
    ShortAttentionBackwardKernel<T>
        <<<static_cast<unsigned>(n * heads), kAttentionThreads, bytes, cuda_stream>>>(
            static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
            static_cast<const T*>(v), lse, static_cast<T*>(dq), static_cast<T*>(dk),
            static_cast<T*>(dv), L, static_cast<int>(heads), D, stride, interleave, scale);
    return static_cast<int>(cudaGetLastError());
  });
}

bool LayerNormFits(DType dtype, int64_t c) {
  int v = dtype == DType::kFloat32 ? 4 : 8;
  if (c < 1 || c % v != 0) v = 1;
  return c >= 1 && c <= int64_t{kLayerNormMaxRowVectors} * v;
}

int64_t LayerNormPartialBlocks(int64_t rows, int64_t c) {
  const int64_t strips = (c + 63) / 64;
  const int64_t wanted = (8 * MultiProcessors() + strips - 1) / strips;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, (rows + 63) / 64));
}

namespace {
// The column-strip sums into partial ([LayerNormPartialBlocks(rows, c), 2, c]): 2 columns a lane
// where c is even and the rows 4-byte aligned.
template <typename T>
int LaunchGammaBeta(const T* dy, const T* x, const float* mean, const float* rstd, float* partial,
                    int64_t rows, int64_t c, cudaStream_t s) {
  const int64_t chunks = LayerNormPartialBlocks(rows, c);
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  auto launch = [&](auto v) {
    constexpr int V = decltype(v)::value;
    const dim3 grid(static_cast<unsigned>((c + 32 * V - 1) / (32 * V)),
                    static_cast<unsigned>(chunks));
    LayerNormGammaBetaKernel<T, V><<<grid, kThreads, 0, s>>>(dy, x, mean, rstd, partial, rows,
                                                             static_cast<int>(c), chunk_rows);
  };
  if (c % 2 == 0 && VectorWidth<T>(2, {dy, x}) == 2) {
    launch(std::integral_constant<int, 2>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
  return static_cast<int>(cudaGetLastError());
}
}  // namespace

int LayerNormForward(DType dtype, const void* x, const void* gamma, const void* beta,
                     const void* add, int64_t period, int64_t repeat, void* y, float* mean,
                     float* rstd, int64_t rows, int64_t c, float eps, void* stream) {
  if (!LayerNormFits(dtype, c) || rows < 0 || (add && (period < 1 || repeat < 1))) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (rows == 0) return 0;
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return WithRowVector<T>(c, {x, gamma, beta, add, y}, [&](auto v) {
      constexpr int V = decltype(v)::value;
      return WithRowIters(c / V, [&](auto iters) {
        constexpr int kIters = decltype(iters)::value;
        LayerNormForwardKernel<T, V, kIters><<<RowBlocks(rows, kLayerNormRowsPerWarp<kIters>),
                                               kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
            static_cast<const T*>(add), period, repeat, static_cast<T*>(y), mean, rstd, rows,
            static_cast<int>(c), eps);
        return static_cast<int>(cudaGetLastError());
      });
    });
  });
}

int LayerNormBackward(DType dtype, const void* dy, const void* x, const float* mean,
                      const float* rstd, const void* gamma, const void* dres, void* dx,
                      float* partial, int64_t rows, int64_t c, void* stream) {
  if (!LayerNormFits(dtype, c) || rows < 0) return static_cast<int>(cudaErrorInvalidValue);
  const auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {  // no rows: γ's and β's gradients are zero
    if (!partial) return 0;
    return static_cast<int>(
        cudaMemsetAsync(partial, 0, LayerNormPartialBlocks(rows, c) * 2 * c * sizeof(float), s));
  }
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int error = WithRowVector<T>(c, {dy, x, gamma, dres, dx}, [&](auto v) {
      constexpr int V = decltype(v)::value;
      return WithRowIters(c / V, [&](auto iters) {
        constexpr int kIters = decltype(iters)::value;
        LayerNormBackwardKernel<T, V, kIters>
            <<<RowBlocks(rows, kLayerNormRowsPerWarp<kIters>), kThreads, 0, s>>>(
                static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
                static_cast<const T*>(gamma), static_cast<const T*>(dres), static_cast<T*>(dx),
                rows, static_cast<int>(c));
        return static_cast<int>(cudaGetLastError());
      });
    });
    if (error != 0 || !partial) return error;
    return LaunchGammaBeta(static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, partial,
                           rows, c, s);
  });
}

int ColumnSums(DType dtype, const void* dy, float* partial, int64_t rows, int64_t c, void* stream) {
  if (rows < 0 || c < 1 || c > (int64_t{1} << 30)) return static_cast<int>(cudaErrorInvalidValue);
  const auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {
    return static_cast<int>(
        cudaMemsetAsync(partial, 0, LayerNormPartialBlocks(rows, c) * 2 * c * sizeof(float), s));
  }
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchGammaBeta(static_cast<const T*>(dy), static_cast<const T*>(nullptr), nullptr,
                           nullptr, partial, rows, c, s);
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
    const auto s = static_cast<cudaStream_t>(stream);
    if (rows % 2 == 0 && cols % 2 == 0 && VectorWidth<T>(2, {in, add, out}) == 2) {
      const dim3 grid(static_cast<unsigned>((grid_x + 1) / 2),
                      static_cast<unsigned>((grid_y + 1) / 2), static_cast<unsigned>(batch));
      TransposePairsKernel<T><<<grid, dim3(kTile, kTileRows), 0, s>>>(
          static_cast<const T*>(in), static_cast<const T*>(add), static_cast<T*>(out), rows, cols);
    } else {
      const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
                      static_cast<unsigned>(batch));
      TransposeKernel<T><<<grid, dim3(kTile, kTileRows), 0, s>>>(
          static_cast<const T*>(in), static_cast<const T*>(add), static_cast<T*>(out), rows, cols);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

const char* FusedCudaErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace adctl::fused_cuda

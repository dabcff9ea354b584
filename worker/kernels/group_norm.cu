// GroupNorm (+ SiLU) kernels (worker/kernels/group_norm.h says what they compute and which
// LibTorch composition they replace): on NCHW x one block per (sample, group); on channels-last x
// per-chunk group sums, then the element-wise pass. Memory-bound: each reads and writes every
// element as few times as the math allows, V elements per load (16 bytes), in fp32 registers
// whatever the storage dtype.
#include "worker/kernels/cuda_common.cuh"
#include "worker/kernels/group_norm_cuda.h"

namespace adctl::fused_cuda {
namespace {

// ---- kernels ----

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

// ---- launchers ----

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

}  // namespace adctl::fused_cuda

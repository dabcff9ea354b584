// Fused element-wise kernels for the UNet's training step (worker/kernels/fused_ops.h says what
// each computes and which LibTorch composition it replaces). Memory-bound: each reads and writes
// every element as few times as the math allows, V elements per load (16 bytes), in fp32
// registers whatever the storage dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
// read mostly from L2), then the normalised, affine, SiLU'd output.
template <typename T, int V>
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
      out.v[k] = Store<T>(z * Sigmoid(z));
    }
    yg[i] = out;
  }
}

// dz = dy · SiLU'(z) with z recomputed from x and the statistics; g = dz · γ; then GroupNorm's
// input gradient dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) over the group.
template <typename T, int V>
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
                                int heads, int d, float scale) {
  extern __shared__ float smem[];
  const int ld = d + 1, ls = length + 1;
  float* Q = smem;
  float* K = Q + length * ld;
  float* V = K + length * ld;
  float* P = V + length * ld;
  const int64_t n = blockIdx.x / heads;
  const int h = blockIdx.x % heads;
  const int64_t row = static_cast<int64_t>(heads) * d;
  const int64_t base = n * length * row + static_cast<int64_t>(h) * d;
  LoadRows(q, Q, base, row, length, d, ld);
  LoadRows(k, K, base, row, length, d, ld);
  LoadRows(v, V, base, row, length, d, ld);
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
                                 int d, float scale) {
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
  const int64_t row = static_cast<int64_t>(heads) * d;
  const int64_t base = n * length * row + static_cast<int64_t>(h) * d;
  const float* row_lse = lse + static_cast<int64_t>(blockIdx.x) * length;
  LoadRows(q, Q, base, row, length, d, ld);
  LoadRows(k, K, base, row, length, d, ld);
  LoadRows(v, V, base, row, length, d, ld);
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
    const int64_t g = base + r * row + c;
    dq[g] = Store<T>(gq * scale);
    dk[g] = Store<T>(gk * scale);
    dv[g] = Store<T>(gv);
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

}  // namespace

int GroupNormSiluForward(DType dtype, const void* x, const void* gamma, const void* beta, void* y,
                         float* mean, float* rstd, int64_t n, int64_t c, int64_t hw, int64_t groups,
                         float eps, void* stream) {
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    WithVectorWidth(VectorWidth<T>(hw, {x, y}), [&](auto v) {
      GroupNormSiluForwardKernel<T, decltype(v)::value>
          <<<static_cast<unsigned>(n * groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
              static_cast<T*>(y), mean, rstd, c, hw, groups, eps);
    });
    return static_cast<int>(cudaGetLastError());
  });
}

int GroupNormSiluBackward(DType dtype, const void* dy, const void* x, const float* mean,
                          const float* rstd, const void* gamma, const void* beta, void* dx,
                          int64_t n, int64_t c, int64_t hw, int64_t groups, void* stream) {
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    WithVectorWidth(VectorWidth<T>(hw, {dy, x, dx}), [&](auto v) {
      GroupNormSiluBackwardKernel<T, decltype(v)::value>
          <<<static_cast<unsigned>(n * groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
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
                          float scale, void* stream) {
  if (!ShortAttentionFits(length, head_dim)) return static_cast<int>(cudaErrorInvalidValue);
  const int L = static_cast<int>(length), D = static_cast<int>(head_dim);
  const size_t bytes = sizeof(float) * (3 * L * (D + 1) + L * (L + 1));
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (int e = AllowSharedMemory(ShortAttentionForwardKernel<T>, bytes)) return e;
    ShortAttentionForwardKernel<T><<<static_cast<unsigned>(n * heads), kAttentionThreads, bytes,
                                     static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(out), lse, L, static_cast<int>(heads), D, scale);
    return static_cast<int>(cudaGetLastError());
  });
}

int ShortAttentionBackward(DType dtype, const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, void* dq, void* dk, void* dv, int64_t n,
                           int64_t length, int64_t heads, int64_t head_dim, float scale,
                           void* stream) {
  if (!ShortAttentionFits(length, head_dim)) return static_cast<int>(cudaErrorInvalidValue);
  const int L = static_cast<int>(length), D = static_cast<int>(head_dim);
  const size_t bytes = sizeof(float) * (4 * L * (D + 1) + 2 * L * (L + 1) + L);
  return WithDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (int e = AllowSharedMemory(ShortAttentionBackwardKernel<T>, bytes)) return e;
    ShortAttentionBackwardKernel<T><<<static_cast<unsigned>(n * heads), kAttentionThreads, bytes,
                                      static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
        static_cast<const T*>(v), lse, static_cast<T*>(dq), static_cast<T*>(dk),
        static_cast<T*>(dv), L, static_cast<int>(heads), D, scale);
    return static_cast<int>(cudaGetLastError());
  });
}

const char* FusedCudaErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace adctl::fused_cuda

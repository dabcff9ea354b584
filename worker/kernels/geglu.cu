// GEGLU kernels (worker/kernels/geglu.h): a · GELU(g) for h = [a, g], and its gradient,
// element-wise in vectors of 16 bytes, in fp32 registers whatever the storage dtype.
#include "worker/kernels/cuda_common.cuh"
#include "worker/kernels/geglu_cuda.h"

namespace adctl::fused_cuda {
namespace {

// GELU(x) = x·Φ(x) and its derivative Φ(x) + x·φ(x), exact (erf) as torch::gelu's default.
__device__ __forceinline__ float Gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678f)); }
__device__ __forceinline__ float GeluGrad(float x) {
  const float cdf = 0.5f * (1.f + erff(x * 0.70710678f));
  const float pdf = 0.39894228f * expf(-0.5f * x * x);
  return cdf + x * pdf;
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

}  // namespace

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

}  // namespace adctl::fused_cuda

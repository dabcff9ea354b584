// The channel-bias sum kernel (worker/kernels/channel_bias.h): a (+ b) + bias over channels-last
// maps in one pass, the sum in fp32 rounded once.
#include "worker/kernels/channel_bias_cuda.h"
#include "worker/kernels/cuda_common.cuh"

namespace adctl::fused_cuda {
namespace {

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

}  // namespace

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

}  // namespace adctl::fused_cuda

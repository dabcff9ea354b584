// The token layout changes' kernels (worker/kernels/token_transpose.h): batched transposes through
// shared-memory tiles, the residual add folded in.
#include "worker/kernels/cuda_common.cuh"
#include "worker/kernels/token_transpose_cuda.h"

namespace adctl::fused_cuda {
namespace {

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

}  // namespace

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

}  // namespace adctl::fused_cuda

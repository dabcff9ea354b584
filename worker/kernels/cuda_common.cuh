// Device and launch helpers every op's kernels share (worker/kernels/<op>.cu): the storage types'
// loads and stores in fp32, V-element vectors, warp sums, and the dispatch from a DType and a
// vector width to the kernels' template arguments. Included by .cu files only; the anonymous
// namespace gives each of them its own copy, as when all the kernels were one file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "worker/kernels/cuda_common.h"

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

// ---- launch helpers ----

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

inline unsigned ElementwiseBlocks(int64_t vectors) {
  return static_cast<unsigned>(std::min<int64_t>((vectors + kThreads - 1) / kThreads, 1 << 20));
}

inline unsigned RowBlocks(int64_t rows, int rows_per_warp) {
  const int64_t per_block = kThreads / 32 * rows_per_warp;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

}  // namespace
}  // namespace adctl::fused_cuda

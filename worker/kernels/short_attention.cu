// Self-attention over short sequences (worker/kernels/short_attention.h): the tensor-core kernels
// (bf16/fp16, L ≤ 16), then the launchers that pick them, the warp kernels or the block kernel
// (short_attention_simt.cuh) for a shape.
#include <mma.h>

#include "worker/kernels/cuda_common.cuh"
#include "worker/kernels/short_attention_cuda.h"
#include "worker/kernels/short_attention_simt.cuh"

namespace adctl::fused_cuda {
namespace {

// ---- kernels ----

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

// ---- launchers ----

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

}  // namespace

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

}  // namespace adctl::fused_cuda

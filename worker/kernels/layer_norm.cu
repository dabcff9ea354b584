// LayerNorm kernels (worker/kernels/layer_norm.h): a warp per row with the row in registers, and
// the column-strip sums of γ's and β's gradients (also a linear layer's bias gradient: ColumnSums,
// worker/kernels/linear.h).
#include "worker/kernels/cuda_common.cuh"
#include "worker/kernels/layer_norm_cuda.h"

namespace adctl::fused_cuda {
namespace {

// ---- kernels ----

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

// ---- launchers ----

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

}  // namespace

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

}  // namespace adctl::fused_cuda

// What every op's CUDA launchers share (worker/kernels/<op>_cuda.h): the kernels behind
// worker/kernels/<op>.h are plain functions on raw device pointers; these headers and the .cu
// files include neither LibTorch nor CUDA headers' types, so the kernels compile with nvcc alone
// and the CPU build never sees them. Every call is enqueued on `stream` (a cudaStream_t) and
// returns 0 or the cudaError_t of the launch; FusedCudaErrorString names it. Tensors are
// contiguous; statistics are fp32.
#pragma once

namespace adctl::fused_cuda {

enum class DType { kFloat32, kBFloat16, kFloat16 };

const char* FusedCudaErrorString(int error);

}  // namespace adctl::fused_cuda

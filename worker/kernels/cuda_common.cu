// The launchers' shared host side (worker/kernels/cuda_common.h).
#include <cuda_runtime.h>

#include "worker/kernels/cuda_common.h"

namespace adctl::fused_cuda {

const char* FusedCudaErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace adctl::fused_cuda

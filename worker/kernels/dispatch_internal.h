// The host glue the ops' .cc files share (worker/kernels/<op>.cc; not for the layers): whether a
// tensor goes to the kernels, the kernels' dtype and error check, and the layouts they read.
// ADCTL_FUSED_CUDA (the CUDA build) brings the CUDA stream and device guard headers and the
// helpers that only the kernels' calls use.
#pragma once

#include <torch/torch.h>

#ifdef ADCTL_FUSED_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/kernels/cuda_common.h"
#endif

namespace adctl {

// The type the reference math computes in: fp64 for fp64 tensors, fp32 otherwise.
torch::ScalarType ComputeType(const torch::Tensor& x);

// x is a CUDA tensor of a dtype the kernels take (fp32, bf16, fp16); always false in a build
// without the kernels.
bool UseKernel(const torch::Tensor& x);

#ifdef ADCTL_FUSED_CUDA
fused_cuda::DType KernelType(const torch::Tensor& t);
// Throws c10::Error naming `what` and the CUDA error where `error` is not 0.
void Check(int error, const char* what);
const void* PtrOrNull(const torch::Tensor& t);
// γ and β as the kernels read them: x's dtype, contiguous, or undefined.
torch::Tensor KernelParam(const torch::Tensor& p, const torch::Tensor& x);
#endif

// The kernels read 16 bytes at a time from 16-byte aligned rows: a view that starts elsewhere is
// copied first.
torch::Tensor Aligned(const torch::Tensor& t);

// t (x's shape) in x's memory layout: a copy where the strides differ.
torch::Tensor SameLayout(const torch::Tensor& t, const torch::Tensor& x);

}  // namespace adctl

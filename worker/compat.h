// The few LibTorch API differences between Debian's LibTorch 1.13 (CPU build, CI) and
// LibTorch 2.x (the GPU machine), in one place.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include "common/job_spec.h"

namespace adctl::compat {

constexpr bool kHasScaledDotProductAttention = TORCH_VERSION_MAJOR >= 2;

// softmax(q kᵀ / √d) v for q [N, heads, Lq, d], k/v [N, heads, Lk, d]; no mask, no dropout.
// LibTorch 2.x: at::scaled_dot_product_attention (flash / memory-efficient kernels on GPU).
// 1.13: the plain formula, softmax computed in fp32 for half types.
inline torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                               const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-1, -2)) * scale;
  auto probs = torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type());
  return torch::matmul(probs, v);
#endif
}

// tensors[i] *= factor for a 0-dim tensor `factor` on the tensors' device: one multi-tensor
// kernel and no host sync on 2.1+; 1.13 (CPU) reads the factor on the host.
inline void ForeachMulByTensor(std::vector<torch::Tensor>& tensors, const torch::Tensor& factor) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_mul_(tensors, factor);
#else
  at::_foreach_mul_(tensors, factor.item<double>());
#endif
}

// Restricts at::scaled_dot_product_attention to one kernel family: "flash", "efficient",
// "cudnn" or "math"; "auto" leaves LibTorch's choice. Returns an empty string when applied,
// else why not (LibTorch 1.13 has no SDPA: only "auto" and "math", the plain formula, work).
inline std::string SelectAttentionKernels(const std::string& name) {
  if (name == "auto") return "";
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  auto& ctx = at::globalContext();
  if (name != "flash" && name != "efficient" && name != "cudnn" && name != "math") {
    return "unknown attention kernels '" + name + "'";
  }
  ctx.setSDPUseFlash(name == "flash");
  ctx.setSDPUseMemEfficient(name == "efficient");
  ctx.setSDPUseCuDNN(name == "cudnn");
  ctx.setSDPUseMath(name == "math");
  return "";
#else
  if (name == "math") return "";
  return "attention kernels '" + name + "' need LibTorch 2.3 or newer (this build has " +
         std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + ")";
#endif
}

// The device a rank computes on: its (only visible) GPU when LibTorch has CUDA, else the CPU.
inline torch::Device ComputeDevice() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

// train.precision on `device` (ResolvePrecision: "auto" is bf16 on a GPU, fp32 on the CPU).
inline torch::ScalarType ComputeDtype(Precision precision, const torch::Device& device) {
  return ResolvePrecision(precision, device.is_cuda()) == Precision::kBf16 ? torch::kBFloat16
                                                                           : torch::kFloat;
}

}  // namespace adctl::compat

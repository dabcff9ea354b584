// The few LibTorch API differences between Debian's LibTorch 1.13 (CPU build, CI) and
// LibTorch 2.x (the GPU machine), in one place.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include "common/job_spec.h"

namespace adctl::compat {

constexpr bool kHasScaledDotProductAttention = TORCH_VERSION_MAJOR >= 2;
constexpr bool kHasFusedAdamW = TORCH_VERSION_MAJOR >= 2;  // at::_fused_adamw_ (CUDA)

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

// avgs[i] += weight * (tensors[i] - avgs[i]): one multi-tensor kernel (at::_foreach_lerp_, 2.x);
// 1.13 has no _foreach_lerp_ and runs diffusers EMAModel's own formula,
// avgs[i] -= weight * (avgs[i] - tensors[i]), in two.
inline void ForeachLerp(std::vector<torch::Tensor>& avgs, const std::vector<torch::Tensor>& tensors,
                        double weight) {
  if (avgs.empty()) return;
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_lerp_(avgs, tensors, weight);
#else
  at::_foreach_sub_(avgs, at::_foreach_sub(avgs, tensors), weight);
#endif
}

// Restricts at::scaled_dot_product_attention to one kernel family (train.attention); kAuto
// leaves LibTorch's choice. Returns an empty string when applied, else why not (LibTorch 1.13
// has no SDPA: only kAuto and kMath, the plain formula, work).
inline std::string SelectAttentionKernels(AttentionKernel kernels) {
  if (kernels == AttentionKernel::kAuto) return "";
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(kernels == AttentionKernel::kFlash);
  ctx.setSDPUseMemEfficient(kernels == AttentionKernel::kEfficient);
  ctx.setSDPUseCuDNN(kernels == AttentionKernel::kCudnn);
  ctx.setSDPUseMath(kernels == AttentionKernel::kMath);
  return "";
#else
  if (kernels == AttentionKernel::kMath) return "";
  return "attention kernels '" + Name(kernels) + "' need LibTorch 2.3 or newer (this build has " +
         std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + ")";
#endif
}

// One AdamW update of every parameter in a single fused kernel (at::_fused_adamw_, LibTorch
// 2.0+, CUDA tensors; what torch.optim.AdamW(fused=True) runs). `step` is a 0-dim fp32 tensor
// on the parameters' device holding the 1-based step being taken. Returns false, changing
// nothing, where it is unavailable (the caller runs the multi-tensor formula instead).
inline bool FusedAdamW(std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                       std::vector<torch::Tensor>& exp_avg, std::vector<torch::Tensor>& exp_avg_sq,
                       const torch::Tensor& step, double lr, double beta1, double beta2,
                       double weight_decay, double eps) {
#if TORCH_VERSION_MAJOR >= 2
  if (params.empty() || !params[0].is_cuda()) return false;
  std::vector<torch::Tensor> max_exp_avg_sq;  // amsgrad off
  const std::vector<torch::Tensor> steps(params.size(), step);
  at::_fused_adamw_(params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq, steps, lr, beta1, beta2,
                    weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  return true;
#else
  (void)params, (void)grads, (void)exp_avg, (void)exp_avg_sq, (void)step, (void)lr, (void)beta1,
      (void)beta2, (void)weight_decay, (void)eps;
  return false;
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

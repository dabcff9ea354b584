// The few LibTorch API differences between Debian's LibTorch 1.13 (CPU build, CI) and
// LibTorch 2.x (the GPU machine), in one place.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

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

}  // namespace adctl::compat

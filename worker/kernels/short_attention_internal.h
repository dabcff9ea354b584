// What short_attention.cc keeps for the tests (tests/worker/kernels/short_attention_test.cc,
// tests/gpu/kernels/): the fused autograd function on separate q, k, v, and the reference math
// (computed in fp32, fp64 for fp64 inputs, and returned in the input's dtype) that the CPU tests
// compare with autograd's gradient of the composition and the GPU tests compare the kernels with.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace adctl {

// FusedShortSelfAttention (short_attention.h) on separate q, k, v (concatenated first).
torch::Tensor FusedShortAttention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t heads);

namespace fused_reference {

struct AttentionResult {
  torch::Tensor out;  // [N, L, heads·d], q's dtype
  torch::Tensor lse;  // [N·heads, L]: each query's log-sum-exp of its scaled scores (fp32/fp64)
};
AttentionResult ShortAttentionForward(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, int64_t heads);
// dq, dk, dv from dout, with the softmax recomputed from q, k and lse.
std::vector<torch::Tensor> ShortAttentionBackward(const torch::Tensor& dout, const torch::Tensor& q,
                                                  const torch::Tensor& k, const torch::Tensor& v,
                                                  const torch::Tensor& lse, int64_t heads);

}  // namespace fused_reference
}  // namespace adctl

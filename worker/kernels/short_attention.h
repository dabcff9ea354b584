// Self-attention over short sequences (short_attention.cu's kernels).
#pragma once

#include <torch/torch.h>

namespace adctl {

// softmax(q kᵀ / √d) v per head for self-attention over short sequences: qkv = [q, k, v]
// ([N, L, 3 · heads·d], the three projections as one linear layer gives them), → [N, L, heads·d],
// ready for the output projection; its gradient comes back as one [N, L, 3 · heads·d] tensor
// (no gradient sums for the shared input, no copies of the thirds). For the motion modules'
// attention over frames, where LibTorch's attention kernels (tiled for long sequences) spend
// ~3 ms per call on 16 × 16 scores: one warp per (sequence, head), everything in shared memory
// (16 × 16 tiles on tensor cores for bf16/fp16 up to 16 frames), no transposes.
// qkv may also be a channels-last clip's rows [B, L, P, 3 · heads·d] (a motion module's
// [B, F, H·W, ·]): the B·P sequences over L are read where they lie (rows P apart), and the
// output is [B, L, P, heads·d].
// ShortAttentionApplies says when the kernel serves for an input x [N, L, ·] (or [B, L, P, ·])
// projected to `inner` = heads·d (CUDA tensor, fused kernels on, L ≤ 32, d ≤ 256,
// fp32/bf16/fp16).
// FusedShortSelfAttention: the fused autograd function on one projection's output (kernels on
// CUDA tensors of a build that has them, the reference math otherwise); the layers call it where
// ShortAttentionApplies.
bool ShortAttentionApplies(const torch::Tensor& x, int64_t inner, int64_t heads);
// A clip's rows [B, L, P, ·] as the B·P sequences [B·P, L, ·] (a copy; [N, L, ·] as it is), and
// such sequences back to `like`'s clip layout [B, L, P, ·] (contiguous).
torch::Tensor ClipSequences(const torch::Tensor& t);
torch::Tensor SequencesToClipRows(const torch::Tensor& t, const torch::Tensor& like);
torch::Tensor FusedShortSelfAttention(const torch::Tensor& qkv, int64_t heads);

}  // namespace adctl

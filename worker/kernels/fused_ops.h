// Fused operations of the UNet's training step: what torch.compile fuses and LibTorch runs as
// separate kernels. Each is an autograd function with two implementations of one formula:
//   - CUDA kernels of our own (<op>.cu; the CUDA build only), reading and writing each
//     activation once where LibTorch's composition makes several passes, and saving less for the
//     backward (GroupNorm+SiLU keeps x and two numbers per group, not GroupNorm's output; GEGLU
//     keeps its input, not GELU's output; short attention q, k, v and one number per query,
//     not the output);
//   - the same math in LibTorch operations (namespace fused_reference), which the CPU tests
//     compare with autograd's gradient of the composition, and the GPU tests compare the kernels
//     with (tests/gpu/fused_ops_gpu_test.cc).
// The layers call GroupNormSilu / GroupNormPlain / LayerNorm / Linear / Geglu / TransposeTokens
// / AddTransposed (and FusedShortAttention where ShortAttentionApplies): the fused kernels for CUDA
// tensors while SetFusedKernels(true) (train.fused_kernels), LibTorch's composition otherwise.
#pragma once

#include <torch/torch.h>

namespace adctl {

// Whether this build has the CUDA kernels.
bool FusedKernelsBuilt();
// x [N, C, ...] stored channels-last ([N, ..., C] contiguous, and not also contiguous as it is):
// the layout the UNet runs in on CUDA (UNet3DImpl::set_channels_last).
bool IsChannelsLast(const torch::Tensor& x);

// Process-wide switch (the trainer sets it from train.fused_kernels); on by default.
void SetFusedKernels(bool on);
bool FusedKernelsEnabled();

// SiLU(GroupNorm(x)); x is [N, C, ...] with C divisible by `groups`; weight and bias [C] or
// undefined.
torch::Tensor GroupNormSilu(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps);
// GroupNorm(x) with its affine and no activation (the transformers' and motion modules' norm):
// the same kernels as GroupNormSilu's, without the SiLU.
torch::Tensor GroupNormPlain(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps);

// {GroupNorm(x) (+ SiLU where silu), x} for an x used again beside its norm (a residual add, a
// shortcut convolution): use the second for that use, and the channels-last kernels' backward
// adds its gradient to the norm's in their pass (where autograd would sum x's two gradients with
// a kernel of its own). Off the kernels: {the composition, x}.
std::pair<torch::Tensor, torch::Tensor> GroupNormResidual(const torch::Tensor& x, int64_t groups,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          bool silu);

// [B, R, S] → [B, S, R], contiguous: the layout changes into and out of the token sequences,
// e.g. a transformer's [N, C, H·W] feature map to [N, H·W, C] tokens, a motion module's
// [B, F·C, H·W] clip to [B, H·W, F·C] (each pixel's frames in a row). LibTorch's copy of a
// transposed view reads one side with a stride; the kernel goes through shared-memory tiles.
torch::Tensor TransposeTokens(const torch::Tensor& x);
// x + yᵀ for x [B, R, S], y [B, S, R]: the way back from tokens with the residual added in the
// same pass. Result [B, R, S], contiguous, x's dtype.
torch::Tensor AddTransposed(const torch::Tensor& x, const torch::Tensor& y);

// a + b + bias for maps a, b [N, C, ...] (b may be undefined) and bias [C], or [R, C] with R
// dividing N, sample i taking row i / (N / R) (a ResNet's time embedding: one row a clip, its
// N / R frames). One pass on CUDA for channels-last maps (LibTorch adds a convolution's bias and
// a broadcast [N, C, 1, 1] with strided passes of their own), the sum in fp32 rounded once; the
// composition elsewhere. ChannelBiasKernelApplies: whether the kernel serves a.
bool ChannelBiasKernelApplies(const torch::Tensor& a);
torch::Tensor AddChannelBias(const torch::Tensor& a, const torch::Tensor& b,
                             const torch::Tensor& bias);

// LayerNorm over the last dimension with [C] weight and bias (either may be undefined, in any
// float type), + `add` where given: add is [P, C] (or [1, P, C]) and row r of x, seen as
// [rows, C], gets add's row r mod P — the motion modules' sinusoidal positions on [N, F, C]
// tokens (P = F), added in the same pass (diffusers adds them after the norm). With repeat R,
// row r gets add's row (r / R) mod P: the positions on a channels-last clip's [B, F, H·W, C]
// rows (P = F, R = H·W). One warp per row
// on CUDA (LayerNorm's own kernels spend a block on a row and run far below the memory rate on
// the UNet's 320 … 1280 channels); the backward gives γ and β their gradients in the same pass
// when they train.
torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps, const torch::Tensor& add = {},
                        int64_t repeat = 1);

// {LayerNorm(x, …) (+ add), x} for a residual block x + f(LayerNorm(x)): use the second for the
// residual, and the kernels' backward adds its gradient to the norm's in the same pass (where
// autograd would sum x's two gradients with a separate kernel). Off CUDA: {LayerNorm(…), x}.
std::pair<torch::Tensor, torch::Tensor> LayerNormResidual(const torch::Tensor& x,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          const torch::Tensor& add = {},
                                                          int64_t repeat = 1);

// x Wᵀ + b: LibTorch's linear, with a trainable bias's gradient (the motion modules') summed over
// the rows by a column-strip kernel on CUDA in place of LibTorch's row reduction.
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias);

// a · GELU(g) for h = [a, g] split in halves along the last dimension (diffusers' GEGLU after
// its projection).
torch::Tensor Geglu(const torch::Tensor& h);

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
// FusedShortAttention: the same on separate q, k, v (concatenated first).
bool ShortAttentionApplies(const torch::Tensor& x, int64_t inner, int64_t heads);
// A clip's rows [B, L, P, ·] as the B·P sequences [B·P, L, ·] (a copy; [N, L, ·] as it is), and
// such sequences back to `like`'s clip layout [B, L, P, ·] (contiguous).
torch::Tensor ClipSequences(const torch::Tensor& t);
torch::Tensor SequencesToClipRows(const torch::Tensor& t, const torch::Tensor& like);
torch::Tensor FusedShortSelfAttention(const torch::Tensor& qkv, int64_t heads);
torch::Tensor FusedShortAttention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t heads);

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (GroupNormSilu / Geglu above pick between
// these and the plain composition.)
torch::Tensor FusedGroupNorm(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, bool silu);
std::pair<torch::Tensor, torch::Tensor> FusedGroupNormResidual(const torch::Tensor& x,
                                                               int64_t groups,
                                                               const torch::Tensor& weight,
                                                               const torch::Tensor& bias,
                                                               double eps, bool silu);
torch::Tensor FusedGroupNormSilu(const torch::Tensor& x, int64_t groups,
                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps);
torch::Tensor FusedTranspose(const torch::Tensor& x);
torch::Tensor FusedAddTransposed(const torch::Tensor& x, const torch::Tensor& y);
torch::Tensor FusedGeglu(const torch::Tensor& h);
torch::Tensor FusedAddChannelBias(const torch::Tensor& a, const torch::Tensor& b,
                                  const torch::Tensor& bias);
std::pair<torch::Tensor, torch::Tensor> FusedLayerNormResidual(
    const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
    const torch::Tensor& add = {}, int64_t repeat = 1);
torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias);
torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, const torch::Tensor& add = {},
                             int64_t repeat = 1);

namespace fused_reference {

// The kernels' formulas in LibTorch operations, computed in fp32 (fp64 for fp64 inputs) and
// returned in the input's dtype. `silu` false: GroupNorm alone.
struct GroupNormSiluResult {
  torch::Tensor y;     // x's shape and dtype
  torch::Tensor mean;  // [N, groups], fp32 (fp64 for fp64 inputs)
  torch::Tensor rstd;  // [N, groups], likewise: 1 / sqrt(var + eps), var the biased variance
};
GroupNormSiluResult GroupNormSiluForward(const torch::Tensor& x, int64_t groups,
                                         const torch::Tensor& weight, const torch::Tensor& bias,
                                         double eps, bool silu = true);
// x's gradient from y's (dy), given the forward's statistics.
torch::Tensor GroupNormSiluBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                    const torch::Tensor& mean, const torch::Tensor& rstd,
                                    const torch::Tensor& weight, const torch::Tensor& bias,
                                    int64_t groups, bool silu = true);
// The weight's and bias's gradients ([C] each, in the compute type), for when they train.
std::pair<torch::Tensor, torch::Tensor> GroupNormSiluAffineBackward(
    const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
    const torch::Tensor& rstd, const torch::Tensor& weight, const torch::Tensor& bias,
    int64_t groups, bool silu = true);

// LayerNorm over the last dimension (+ add, [P, C] periodic over the rows, each row of add
// `repeat` consecutive rows, or undefined / empty);
// mean and rstd are [rows] in the compute type.
struct LayerNormResult {
  torch::Tensor y, mean, rstd;
};
LayerNormResult LayerNormForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps,
                                 const torch::Tensor& add = {}, int64_t repeat = 1);
torch::Tensor LayerNormBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                const torch::Tensor& mean, const torch::Tensor& rstd,
                                const torch::Tensor& weight);
// γ's and β's gradients: [Σ dy · x̂, Σ dy] over the rows, in the compute type.
std::pair<torch::Tensor, torch::Tensor> LayerNormAffineBackward(const torch::Tensor& dy,
                                                                const torch::Tensor& x,
                                                                const torch::Tensor& mean,
                                                                const torch::Tensor& rstd);

torch::Tensor GegluForward(const torch::Tensor& h);
torch::Tensor GegluBackward(const torch::Tensor& dout, const torch::Tensor& h);

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

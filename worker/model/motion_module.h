// One AnimateDiff motion module: a temporal transformer that attends over the frame axis.
//
// diffusers `AnimateDiffTransformer3D` (models/unets/unet_motion_model.py), keys as there:
// norm (GroupNorm, eps 1e-6) → proj_in (Linear) → transformer_blocks.0 [norm1 + pos_embed →
// attn1 (self, over frames); norm2 + pos_embed → attn2 (self again); norm3 → ff (GEGLU)] →
// proj_out (Linear) + residual. The module ignores the timestep and the text
// (diffusers models/unets/unet_motion_model.py, AnimateDiffTransformer3D). `pos_embed.pe` [1,
// max_seq_length, C] is the sinusoidal table with interleaved sin/cos, recomputed at construction
// and saved for diffusers compatibility.
#pragma once

#include <torch/torch.h>

#include "worker/model/layers.h"

namespace adctl {

// Sinusoidal position table [1, max_len, dim]: pe[p, 2i] = sin(p·ω_i), pe[p, 2i+1] = cos(p·ω_i),
// ω_i = exp(-2i·ln(10000)/dim).
torch::Tensor SinusoidalPositionTable(int64_t max_len, int64_t dim);
// `table` [1, L, C] linearly interpolated along its positions to [1, length, C], the first and
// the last position kept (align_corners): a module trained on L frames reads F > L frames with
// the positions it knows, stretched (model.motion_max_frames; how the AnimateDiff community
// trains 64-frame modules from 16/32-frame ones).
torch::Tensor InterpolatePositionTable(const torch::Tensor& table, int64_t length);

class PositionalEmbeddingImpl : public torch::nn::Module {
 public:
  PositionalEmbeddingImpl(int64_t dim, int64_t max_len);
  torch::Tensor forward(const torch::Tensor& x);      // x [N, F, C]: x + pe[:, :F]
  torch::Tensor Table(const torch::Tensor& x) const;  // pe[0, :F] in x's dtype, [F, C]
  torch::Tensor pe;
};
TORCH_MODULE(PositionalEmbedding);

class TemporalTransformerBlockImpl : public torch::nn::Module {
 public:
  TemporalTransformerBlockImpl(int64_t dim, int64_t heads, int64_t max_len);
  // x [B·H·W, F, C] tokens, or a channels-last clip's rows [B, F, H·W, C] (each pixel's frames
  // interleaved: the norms add the positions by frame, the attention reads rows H·W apart).
  torch::Tensor forward(torch::Tensor x);
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  Attention attn1{nullptr}, attn2{nullptr};
  FeedForward ff{nullptr};
  PositionalEmbedding pos_embed{nullptr};
};
TORCH_MODULE(TemporalTransformerBlock);

class MotionModuleImpl : public torch::nn::Module {
 public:
  MotionModuleImpl(int64_t channels, int64_t heads, int64_t groups, int64_t max_len);
  // x [(B·F), C, H, W] → same shape. `norm_across_frames`: GroupNorm statistics over all
  // frames of a clip (diffusers) or per frame (original AnimateDiff), spec §2.5. A channels-last
  // x ([B, F, H, W, C] in memory) runs without transposes: the tokens are its rows.
  torch::Tensor forward(const torch::Tensor& x, int64_t num_frames, bool norm_across_frames);
  // New-module initialisation: proj_out zeroed so the module starts as the identity.
  void ZeroInitProjOut();
  // Interpolates every block's table to `length` positions (InterpolatePositionTable); nothing
  // when it already holds that many.
  void ExtendPositions(int64_t length);
  int64_t max_len;
  torch::nn::GroupNorm norm{nullptr};
  torch::nn::Linear proj_in{nullptr}, proj_out{nullptr};
  torch::nn::ModuleList transformer_blocks;
};
TORCH_MODULE(MotionModule);

}  // namespace adctl

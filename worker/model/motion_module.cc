#include "worker/model/motion_module.h"

#include <cmath>
#include <stdexcept>
#include <tuple>

#include "worker/kernels/dispatch.h"
#include "worker/kernels/layer_norm.h"
#include "worker/kernels/token_transpose.h"

namespace adctl {

torch::Tensor SinusoidalPositionTable(int64_t max_len, int64_t dim) {
  auto position = torch::arange(max_len, torch::kFloat).unsqueeze(1);
  auto div_term = torch::exp(torch::arange(0, dim, 2, torch::kFloat) * (-std::log(10000.0) / dim));
  auto pe = torch::zeros({1, max_len, dim});
  using torch::indexing::Slice;
  pe.index_put_({0, Slice(), Slice(0, torch::indexing::None, 2)}, torch::sin(position * div_term));
  pe.index_put_({0, Slice(), Slice(1, torch::indexing::None, 2)}, torch::cos(position * div_term));
  return pe;
}

torch::Tensor InterpolatePositionTable(const torch::Tensor& table, int64_t length) {
  namespace F = torch::nn::functional;
  const auto stretched =
      F::interpolate(table.permute({0, 2, 1}), F::InterpolateFuncOptions()
                                                   .size(std::vector<int64_t>{length})
                                                   .mode(torch::kLinear)
                                                   .align_corners(true));
  return stretched.permute({0, 2, 1}).contiguous();
}

PositionalEmbeddingImpl::PositionalEmbeddingImpl(int64_t dim, int64_t max_len) {
  pe = register_buffer("pe", SinusoidalPositionTable(max_len, dim));
}

torch::Tensor PositionalEmbeddingImpl::forward(const torch::Tensor& x) { return x + Table(x); }

torch::Tensor PositionalEmbeddingImpl::Table(const torch::Tensor& x) const {
  return pe[0].slice(0, 0, x.size(1)).to(x.scalar_type());
}

TemporalTransformerBlockImpl::TemporalTransformerBlockImpl(int64_t dim, int64_t heads,
                                                           int64_t max_len) {
  auto ln = [dim] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5)); };
  norm1 = register_module("norm1", ln());
  attn1 = register_module("attn1", Attention(dim, dim, heads, dim / heads));
  norm2 = register_module("norm2", ln());
  attn2 = register_module("attn2", Attention(dim, dim, heads, dim / heads));
  norm3 = register_module("norm3", ln());
  ff = register_module("ff", FeedForward(dim));
  pos_embed = register_module("pos_embed", PositionalEmbedding(dim, max_len));
}

torch::Tensor TemporalTransformerBlockImpl::forward(torch::Tensor x) {
  // diffusers: pos_embed(norm(x)); the table is added inside the norm's pass.
  const auto table = pos_embed->Table(x);
  const int64_t repeat = x.dim() == 4 ? x.size(2) : 1;  // a clip's rows: H·W rows a frame
  auto [h1, r1] = LayerNormResidualIn(norm1, x, table, repeat);
  x = attn1(h1) + r1;
  auto [h2, r2] = LayerNormResidualIn(norm2, x, table, repeat);
  x = attn2(h2) + r2;
  auto [h3, r3] = LayerNormResidualIn(norm3, x);
  return ff(h3) + r3;
}

MotionModuleImpl::MotionModuleImpl(int64_t channels, int64_t heads, int64_t groups, int64_t max_len)
    : max_len(max_len) {
  norm = register_module(
      "norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(1e-6)));
  proj_in = register_module("proj_in", MakeLinear(torch::nn::LinearOptions(channels, channels)));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  transformer_blocks->push_back(TemporalTransformerBlock(channels, heads, max_len));
  proj_out = register_module("proj_out", MakeLinear(torch::nn::LinearOptions(channels, channels)));
}

void MotionModuleImpl::ExtendPositions(int64_t length) {
  if (length <= max_len) return;
  torch::NoGradGuard no_grad;
  for (const auto& block : *transformer_blocks) {
    torch::Tensor& pe = block->as<TemporalTransformerBlockImpl>()->pos_embed->pe;
    pe.set_data(InterpolatePositionTable(pe, length));
  }
  max_len = length;
}

void MotionModuleImpl::ZeroInitProjOut() {
  torch::NoGradGuard no_grad;
  proj_out->weight.zero_();
  proj_out->bias.zero_();
}

torch::Tensor MotionModuleImpl::forward(const torch::Tensor& x, int64_t num_frames,
                                        bool norm_across_frames) {
  if (num_frames > max_len) {
    throw std::invalid_argument("motion module: " + std::to_string(num_frames) +
                                " frames exceed motion_max_seq_length " + std::to_string(max_len));
  }
  const int64_t bf = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t b = bf / num_frames;
  if (IsChannelsLast(x)) {
    // The clip's rows [B, F, H·W, C] are the tokens: GroupNorm keeps the layout (across frames:
    // the 5-D view [B, C, F, H, W] is channels-last too), the blocks work on rows, and the
    // residual is a plain add of the norm's pass-through (its gradient added in the norm's pass).
    torch::Tensor normed, input;
    if (norm_across_frames) {
      auto [y5, x5] = GroupNormResidualIn(
          norm, x.view({b, num_frames, c, h, w}).permute({0, 2, 1, 3, 4}), /*silu=*/false);
      normed = y5.permute({0, 2, 3, 4, 1});
      input = x5.permute({0, 2, 1, 3, 4}).reshape({bf, c, h, w});
    } else {
      std::tie(normed, input) = GroupNormResidualIn(norm, x, /*silu=*/false);
      normed = normed.permute({0, 2, 3, 1});
    }
    auto y = LinearIn(proj_in, normed.reshape({b, num_frames, h * w, c}));
    for (const auto& block : *transformer_blocks) {
      y = block->as<TemporalTransformerBlockImpl>()->forward(y);
    }
    y = LinearIn(proj_out, y);
    return input + y.view({bf, h, w, c}).permute({0, 3, 1, 2});
  }
  // Tokens [B·H·W, F, C]: each pixel's frames in a row. The clip [B, F·C, H·W] transposed to
  // [B, H·W, F·C] (one tiled transpose), and back with the residual added in the same pass.
  torch::Tensor tokens;
  if (norm_across_frames) {
    auto clip = x.view({b, num_frames, c, h, w}).permute({0, 2, 1, 3, 4});  // [B, C, F, H, W]
    tokens = GroupNormIn(norm, clip).permute({0, 3, 4, 2, 1}).reshape({b, h * w, num_frames * c});
  } else {
    tokens = TransposeTokens(GroupNormIn(norm, x).view({b, num_frames * c, h * w}));
  }
  auto y = LinearIn(proj_in, tokens.view({b * h * w, num_frames, c}));
  for (const auto& block : *transformer_blocks) {
    y = block->as<TemporalTransformerBlockImpl>()->forward(y);
  }
  y = LinearIn(proj_out, y);
  return AddTransposed(x.reshape({b, num_frames * c, h * w}), y.view({b, h * w, num_frames * c}))
      .view({bf, c, h, w});
}

}  // namespace adctl

#include "worker/model/layers.h"

#include <cmath>

#include "worker/compat.h"
#include "worker/kernels/channel_bias.h"
#include "worker/kernels/dispatch.h"
#include "worker/kernels/geglu.h"
#include "worker/kernels/group_norm.h"
#include "worker/kernels/layer_norm.h"
#include "worker/kernels/linear.h"
#include "worker/kernels/short_attention.h"
#include "worker/kernels/token_transpose.h"
#include "worker/model/lora.h"

namespace adctl {

namespace F = torch::nn::functional;

namespace {

torch::Tensor As(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() && t.scalar_type() != like.scalar_type() ? t.to(like.scalar_type()) : t;
}

thread_local const torch::Device* deferred_device = nullptr;

}  // namespace

DeferredInit::DeferredInit(torch::Device device) : previous_(deferred_device), device_(device) {
  deferred_device = &device_;
}

DeferredInit::~DeferredInit() { deferred_device = previous_; }

torch::nn::Linear MakeLinear(const torch::nn::LinearOptions& options) {
  if (deferred_device == nullptr) return torch::nn::Linear(options);
  // Built at 1×1 (nothing to initialise), then given its real, uninitialised tensors.
  auto small = options;
  small.in_features(1).out_features(1);
  torch::nn::Linear layer(small);
  torch::NoGradGuard no_grad;
  const auto on = torch::TensorOptions().device(*deferred_device);
  layer->weight.set_data(torch::empty({options.out_features(), options.in_features()}, on));
  if (options.bias()) layer->bias.set_data(torch::empty({options.out_features()}, on));
  layer->options = options;
  return layer;
}

torch::nn::Conv2d MakeConv2d(const torch::nn::Conv2dOptions& options) {
  if (deferred_device == nullptr) return torch::nn::Conv2d(options);
  auto small = options;
  small.in_channels(options.groups()).out_channels(options.groups());
  torch::nn::Conv2d layer(small);
  torch::NoGradGuard no_grad;
  const auto on = torch::TensorOptions().device(*deferred_device);
  const auto& k = *options.kernel_size();
  layer->weight.set_data(torch::empty(
      {options.out_channels(), options.in_channels() / options.groups(), k[0], k[1]}, on));
  if (options.bias()) layer->bias.set_data(torch::empty({options.out_channels()}, on));
  layer->options.in_channels(options.in_channels()).out_channels(options.out_channels());
  return layer;
}

void InitializeLinearAndConv(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  auto init = [](torch::Tensor& weight, torch::Tensor& bias) {
    torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
    if (bias.defined()) {
      const double fan_in = static_cast<double>(weight.numel() / weight.size(0));
      const double bound = 1.0 / std::sqrt(fan_in);
      bias.uniform_(-bound, bound);
    }
  };
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (auto* linear = m->as<torch::nn::LinearImpl>()) init(linear->weight, linear->bias);
    if (auto* conv = m->as<torch::nn::Conv2dImpl>()) init(conv->weight, conv->bias);
  }
}

torch::Tensor LinearIn(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return Linear(x, As(layer->weight, x), As(layer->bias, x));
}

torch::Tensor Conv2dIn(const torch::nn::Conv2d& layer, const torch::Tensor& x, bool with_bias,
                       const torch::Tensor& bias) {
  // Every conv of the SD UNet pads by (k − 1) / 2 ("same" for stride 1, downsample_padding 1).
  const int64_t pad = layer->weight.size(-1) / 2;
  const auto& b = bias.defined() ? bias : (with_bias ? layer->bias : torch::Tensor());
  if (b.defined() && ChannelBiasKernelApplies(x)) {  // the bias in a pass of its own, vectorized
    return AddChannelBias(
        torch::conv2d(x, As(layer->weight, x), {}, *layer->options.stride(), {pad, pad}), {}, b);
  }
  return torch::conv2d(x, As(layer->weight, x), As(b, x), *layer->options.stride(), {pad, pad});
}

torch::Tensor GroupNormIn(const torch::nn::GroupNorm& layer, const torch::Tensor& x) {
  const auto& o = layer->options;
  return GroupNormPlain(x, o.num_groups(), As(layer->weight, x), As(layer->bias, x), o.eps());
}

torch::Tensor GroupNormSiluIn(const torch::nn::GroupNorm& layer, const torch::Tensor& x) {
  const auto& o = layer->options;
  return GroupNormSilu(x, o.num_groups(), As(layer->weight, x), As(layer->bias, x), o.eps());
}

std::pair<torch::Tensor, torch::Tensor> GroupNormResidualIn(const torch::nn::GroupNorm& layer,
                                                            const torch::Tensor& x, bool silu) {
  const auto& o = layer->options;
  return GroupNormResidual(x, o.num_groups(), As(layer->weight, x), As(layer->bias, x), o.eps(),
                           silu);
}

torch::Tensor LayerNormIn(const torch::nn::LayerNorm& layer, const torch::Tensor& x,
                          const torch::Tensor& add, int64_t repeat) {
  const auto& o = layer->options;
  if (o.normalized_shape().size() != 1) {
    TORCH_CHECK(!add.defined(), "LayerNorm over ", o.normalized_shape(), " adds no table");
    return torch::layer_norm(x, o.normalized_shape(), As(layer->weight, x), As(layer->bias, x),
                             o.eps());
  }
  return LayerNorm(x, layer->weight, layer->bias, o.eps(), add, repeat);
}

std::pair<torch::Tensor, torch::Tensor> LayerNormResidualIn(const torch::nn::LayerNorm& layer,
                                                            const torch::Tensor& x,
                                                            const torch::Tensor& add,
                                                            int64_t repeat) {
  const auto& o = layer->options;
  if (o.normalized_shape().size() != 1) return {LayerNormIn(layer, x, add, repeat), x};
  return LayerNormResidual(x, layer->weight, layer->bias, o.eps(), add, repeat);
}

torch::Tensor TimestepFeatures(const torch::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos,
                               double freq_shift) {
  const int64_t half = dim / 2;
  auto options = torch::TensorOptions().dtype(torch::kFloat).device(timesteps.device());
  auto exponent = -std::log(10000.0) * torch::arange(0, half, options) / (half - freq_shift);
  auto args = timesteps.to(torch::kFloat).unsqueeze(1) * torch::exp(exponent).unsqueeze(0);
  auto emb = torch::cat({torch::sin(args), torch::cos(args)}, -1);
  if (flip_sin_to_cos) emb = torch::cat({emb.slice(1, half), emb.slice(1, 0, half)}, -1);
  return emb;
}

TimestepEmbeddingImpl::TimestepEmbeddingImpl(int64_t in_dim, int64_t out_dim) {
  linear_1 = register_module("linear_1", MakeLinear(torch::nn::LinearOptions(in_dim, out_dim)));
  linear_2 = register_module("linear_2", MakeLinear(torch::nn::LinearOptions(out_dim, out_dim)));
}

torch::Tensor TimestepEmbeddingImpl::forward(const torch::Tensor& features) {
  return LinearIn(linear_2, torch::silu(LinearIn(linear_1, features)));
}

ResnetBlock2DImpl::ResnetBlock2DImpl(int64_t in_channels, int64_t out_channels,
                                     int64_t temb_channels, int64_t groups, double eps) {
  auto gn = [&](int64_t c) {
    return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, c).eps(eps));
  };
  auto conv3 = [](int64_t i, int64_t o) {
    return MakeConv2d(torch::nn::Conv2dOptions(i, o, 3).padding(1));
  };
  norm1 = register_module("norm1", gn(in_channels));
  conv1 = register_module("conv1", conv3(in_channels, out_channels));
  time_emb_proj = register_module(
      "time_emb_proj", MakeLinear(torch::nn::LinearOptions(temb_channels, out_channels)));
  norm2 = register_module("norm2", gn(out_channels));
  conv2 = register_module("conv2", conv3(out_channels, out_channels));
  if (in_channels != out_channels) {
    conv_shortcut = register_module(
        "conv_shortcut", MakeConv2d(torch::nn::Conv2dOptions(in_channels, out_channels, 1)));
  }
}

torch::Tensor ResnetBlock2DImpl::forward(const torch::Tensor& x, const torch::Tensor& emb,
                                         int64_t num_frames) {
  // conv1's bias joins the time embedding's projection, and conv2's the residual or the
  // shortcut convolution's: each is added with its map in one pass (AddChannelBias; LibTorch
  // adds a convolution's bias, and a broadcast over the frames, in strided passes of their own).
  // x's second use (the residual or the shortcut convolution) takes the norm's pass-through.
  const auto [normed, input] = GroupNormResidualIn(norm1, x, /*silu=*/true);
  auto h = Conv2dIn(conv1, normed, /*with_bias=*/false);
  // Projected once per clip: row b of t serves the clip's num_frames frames.
  auto t = LinearIn(time_emb_proj, torch::silu(As(emb, x)));
  if (conv1->bias.defined()) t = t + As(conv1->bias, t);
  TORCH_CHECK(t.size(0) * num_frames == h.size(0), "ResNet block: ", t.size(0),
              " time embeddings for ", h.size(0), " frames of ", num_frames);
  h = GroupNormSiluIn(norm2, AddChannelBias(h, {}, t));
  auto residual = input;
  auto bias = conv2->bias;
  if (conv_shortcut) {
    residual = Conv2dIn(conv_shortcut, input, /*with_bias=*/false);
    const auto& b = conv_shortcut->bias;
    bias = !b.defined() ? bias : bias.defined() ? b + bias : b;
  }
  h = Conv2dIn(conv2, h, /*with_bias=*/false);
  return bias.defined() ? AddChannelBias(residual, h, bias) : residual + h;
}

AttentionImpl::AttentionImpl(int64_t query_dim, int64_t context_dim, int64_t heads,
                             int64_t head_dim)
    : heads(heads) {
  const int64_t inner = heads * head_dim;
  auto nobias = [](int64_t i, int64_t o) {
    return MakeLinear(torch::nn::LinearOptions(i, o).bias(false));
  };
  to_q = register_module("to_q", nobias(query_dim, inner));
  to_k = register_module("to_k", nobias(context_dim, inner));
  to_v = register_module("to_v", nobias(context_dim, inner));
  to_out = register_module("to_out", torch::nn::ModuleList());
  out_proj = MakeLinear(torch::nn::LinearOptions(inner, query_dim));
  to_out->push_back(out_proj);
  to_out->push_back(torch::nn::Dropout(0.0));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                     int64_t repeat) {
  // Self-attention over short sequences (the motion modules' over 16 frames): one projection to
  // [q, k, v] and one fused kernel, where LibTorch's tiled kernels spend most of their time on
  // padding.
  if (!context.defined() && repeat <= 1 && ShortAttentionApplies(x, to_q->weight.size(0), heads)) {
    auto w = torch::cat({to_q->weight, to_k->weight, to_v->weight});
    auto qkv = torch::linear(x, As(w, x));
    if (lora_q || lora_k || lora_v) {
      // The adapters' terms in the same [q, k, v] layout, added by one GEMM.
      qkv = AddLoraTerms(qkv, x, {lora_q.get(), lora_k.get(), lora_v.get()}, to_q->weight.size(0),
                         is_training());
    }
    return Project(out_proj, lora_out, FusedShortSelfAttention(qkv, heads));
  }
  if (x.dim() == 4) {  // a clip's rows [B, L, P, C]: as [B·P, L, C] sequences, and back
    TORCH_CHECK(!context.defined(), "attention: clip rows ", x.sizes(),
                " take self-attention only");
    return SequencesToClipRows(forward(ClipSequences(x)), x);
  }
  const auto& ctx = context.defined() ? context : x;
  auto q = Project(to_q, lora_q, x);
  auto k = Project(to_k, lora_k, As(ctx, x));
  auto v = Project(to_v, lora_v, As(ctx, x));
  auto split = [this](const torch::Tensor& t) {  // [N, L, H·d] → [N, H, L, d]
    return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
  };
  q = split(q);
  k = split(k);
  v = split(v);
  if (repeat > 1) {
    k = k.repeat_interleave(repeat, 0);
    v = v.repeat_interleave(repeat, 0);
  }
  auto out = compat::ScaledDotProductAttention(q, k, v);
  out = out.transpose(1, 2).reshape({x.size(0), x.size(1), -1});
  return Project(out_proj, lora_out, out);
}

torch::Tensor AttentionImpl::Project(const torch::nn::Linear& layer,
                                     const std::shared_ptr<LoraLayer>& lora,
                                     const torch::Tensor& x) const {
  auto y = LinearIn(layer, x);
  return lora ? AddLoraTerms(y, x, {lora.get()}, y.size(-1), is_training()) : y;
}

std::shared_ptr<LoraLayer>* AttentionImpl::LoraSlot(const std::string& projection) {
  if (projection == "to_q") return &lora_q;
  if (projection == "to_k") return &lora_k;
  if (projection == "to_v") return &lora_v;
  if (projection == "to_out.0") return &lora_out;
  return nullptr;
}

const torch::Tensor& AttentionImpl::ProjectionWeight(const std::string& projection) const {
  if (projection == "to_q") return to_q->weight;
  if (projection == "to_k") return to_k->weight;
  if (projection == "to_v") return to_v->weight;
  return out_proj->weight;
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t mult) {
  const int64_t inner = dim * mult;
  net = register_module("net", torch::nn::ModuleList());
  auto geglu = std::make_shared<torch::nn::Module>();
  proj = geglu->register_module("proj", MakeLinear(torch::nn::LinearOptions(dim, inner * 2)));
  net->push_back(geglu);
  net->push_back(torch::nn::Dropout(0.0));
  out = MakeLinear(torch::nn::LinearOptions(inner, dim));
  net->push_back(out);
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return LinearIn(out, Geglu(LinearIn(proj, x)));
}

SpatialTransformerBlockImpl::SpatialTransformerBlockImpl(int64_t dim, int64_t heads,
                                                         int64_t context_dim) {
  auto ln = [dim] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5)); };
  norm1 = register_module("norm1", ln());
  attn1 = register_module("attn1", Attention(dim, dim, heads, dim / heads));
  norm2 = register_module("norm2", ln());
  attn2 = register_module("attn2", Attention(dim, context_dim, heads, dim / heads));
  norm3 = register_module("norm3", ln());
  ff = register_module("ff", FeedForward(dim));
}

torch::Tensor SpatialTransformerBlockImpl::forward(torch::Tensor x, const torch::Tensor& context,
                                                   int64_t repeat) {
  auto [h1, r1] = LayerNormResidualIn(norm1, x);
  x = attn1(h1) + r1;
  auto [h2, r2] = LayerNormResidualIn(norm2, x);
  x = attn2(h2, context, repeat) + r2;
  auto [h3, r3] = LayerNormResidualIn(norm3, x);
  return ff(h3) + r3;
}

Transformer2DImpl::Transformer2DImpl(int64_t channels, int64_t heads, int64_t context_dim,
                                     int64_t groups, bool linear_projection)
    : linear_projection(linear_projection) {
  norm = register_module(
      "norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(1e-6)));
  if (linear_projection) {
    proj_in = torch::nn::AnyModule(MakeLinear(torch::nn::LinearOptions(channels, channels)));
    proj_out = torch::nn::AnyModule(MakeLinear(torch::nn::LinearOptions(channels, channels)));
  } else {
    proj_in = torch::nn::AnyModule(MakeConv2d(torch::nn::Conv2dOptions(channels, channels, 1)));
    proj_out = torch::nn::AnyModule(MakeConv2d(torch::nn::Conv2dOptions(channels, channels, 1)));
  }
  register_module("proj_in", proj_in.ptr());
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  transformer_blocks->push_back(SpatialTransformerBlock(channels, heads, context_dim));
  register_module("proj_out", proj_out.ptr());
}

torch::Tensor Transformer2DImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                         int64_t num_frames) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  // Tokens [N, H·W, C] by a tiled transpose; the 1×1 convolutions of conv-projection models
  // (SD1.5) are the same linear map on tokens, which spares cuDNN's NCHW↔NHWC conversions, the
  // separate bias add and the copies of the transposed views.
  auto project = [&](const torch::nn::AnyModule& module, const torch::Tensor& tokens) {
    if (linear_projection)
      return LinearIn(torch::nn::Linear(module.ptr<torch::nn::LinearImpl>()), tokens);
    const auto& conv = module.ptr<torch::nn::Conv2dImpl>();
    return torch::linear(tokens, As(conv->weight.flatten(1), tokens), As(conv->bias, tokens));
  };
  // Channels-last feature maps are tokens already ([N, H, W, C] in memory): views both ways.
  const bool channels_last = IsChannelsLast(x);
  const auto [normed, input] = GroupNormResidualIn(norm, x, /*silu=*/false);
  auto y = channels_last ? normed.permute({0, 2, 3, 1}).reshape({n, h * w, c})
                         : TransposeTokens(normed.view({n, c, h * w}));
  y = project(proj_in, y);
  for (const auto& block : *transformer_blocks) {
    y = block->as<SpatialTransformerBlockImpl>()->forward(y, context, num_frames);
  }
  y = project(proj_out, y);
  if (channels_last) return input + y.view({n, h, w, c}).permute({0, 3, 1, 2});
  return AddTransposed(input.reshape({n, c, h * w}), y).view({n, c, h, w});
}

Downsample2DImpl::Downsample2DImpl(int64_t channels, int64_t padding) {
  conv = register_module(
      "conv",
      MakeConv2d(torch::nn::Conv2dOptions(channels, channels, 3).stride(2).padding(padding)));
}

torch::Tensor Downsample2DImpl::forward(const torch::Tensor& x) { return Conv2dIn(conv, x); }

Upsample2DImpl::Upsample2DImpl(int64_t channels) {
  conv = register_module("conv",
                         MakeConv2d(torch::nn::Conv2dOptions(channels, channels, 3).padding(1)));
}

torch::Tensor Upsample2DImpl::forward(const torch::Tensor& x, std::vector<int64_t> size) {
  auto up = F::interpolate(x, F::InterpolateFuncOptions().size(size).mode(torch::kNearest));
  return Conv2dIn(conv, up);
}

}  // namespace adctl

#include "worker/model/unet3d.h"

#include "worker/model/checkpoint.h"

namespace adctl {

Status CheckMotionFitsUNet(const UNetConfig& unet, const MotionConfig& motion) {
  if (motion.layers_per_block != unet.layers_per_block) {
    return InvalidArgument(
        "motion adapter motion_layers_per_block (" + std::to_string(motion.layers_per_block) +
        ") must equal the UNet's layers_per_block (" + std::to_string(unet.layers_per_block) + ")");
  }
  for (int64_t c : unet.block_out_channels) {
    if (c % motion.norm_num_groups != 0 || c % motion.num_attention_heads != 0) {
      return InvalidArgument("motion adapter: channel count " + std::to_string(c) +
                             " not divisible by motion_norm_num_groups or heads");
    }
  }
  return Status::Ok();
}

UNet3DImpl::UNet3DImpl(const UNetConfig& unet, const MotionConfig& motion)
    : unet_(unet), motion_(motion) {
  const auto& ch = unet.block_out_channels;
  const size_t levels = ch.size();
  const int64_t temb = unet.time_embed_dim();
  const int64_t groups = unet.norm_num_groups;
  const double eps = unet.norm_eps;
  auto motion_module = [&](int64_t c) {
    return MotionModule(c, motion.num_attention_heads, motion.norm_num_groups,
                        motion.max_seq_length);
  };
  auto transformer = [&](int64_t c, int64_t heads) {
    return Transformer2D(c, heads, unet.cross_attention_dim, groups, unet.use_linear_projection);
  };

  conv_in = register_module(
      "conv_in", MakeConv2d(torch::nn::Conv2dOptions(unet.in_channels, ch[0], 3).padding(1)));
  time_embedding = register_module("time_embedding", TimestepEmbedding(ch[0], temb));

  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  int64_t out_c = ch[0];
  for (size_t i = 0; i < levels; ++i) {
    const int64_t in_c = out_c;
    out_c = ch[i];
    UNetBlock block;
    block->resnets = block->register_module("resnets", torch::nn::ModuleList());
    const bool cross = unet.HasCrossAttention(i, /*up=*/false);
    if (cross) block->attentions = block->register_module("attentions", torch::nn::ModuleList());
    block->motion_modules = block->register_module("motion_modules", torch::nn::ModuleList());
    for (int64_t l = 0; l < unet.layers_per_block; ++l) {
      block->resnets->push_back(ResnetBlock2D(l == 0 ? in_c : out_c, out_c, temb, groups, eps));
      if (cross) block->attentions->push_back(transformer(out_c, unet.attention_heads[i]));
      block->motion_modules->push_back(motion_module(out_c));
    }
    if (i + 1 < levels) {
      block->downsamplers = block->register_module("downsamplers", torch::nn::ModuleList());
      block->downsamplers->push_back(Downsample2D(out_c, unet.downsample_padding));
    }
    down_blocks->push_back(block);
  }

  const int64_t mid_c = ch.back();
  mid_block = register_module("mid_block", UNetBlock());
  mid_block->resnets = mid_block->register_module("resnets", torch::nn::ModuleList());
  mid_block->attentions = mid_block->register_module("attentions", torch::nn::ModuleList());
  mid_block->resnets->push_back(ResnetBlock2D(mid_c, mid_c, temb, groups, eps));
  mid_block->resnets->push_back(ResnetBlock2D(mid_c, mid_c, temb, groups, eps));
  mid_block->attentions->push_back(transformer(mid_c, unet.attention_heads.back()));
  if (motion.use_mid_block) {
    mid_block->motion_modules =
        mid_block->register_module("motion_modules", torch::nn::ModuleList());
    mid_block->motion_modules->push_back(motion_module(mid_c));
  }

  up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  std::vector<int64_t> rev(ch.rbegin(), ch.rend());
  std::vector<int64_t> rev_heads(unet.attention_heads.rbegin(), unet.attention_heads.rend());
  int64_t prev_c = rev[0];
  for (size_t i = 0; i < levels; ++i) {
    const int64_t o = rev[i];
    const int64_t in_c = rev[std::min(i + 1, levels - 1)];
    UNetBlock block;
    block->resnets = block->register_module("resnets", torch::nn::ModuleList());
    const bool cross = unet.HasCrossAttention(i, /*up=*/true);
    if (cross) block->attentions = block->register_module("attentions", torch::nn::ModuleList());
    block->motion_modules = block->register_module("motion_modules", torch::nn::ModuleList());
    for (int64_t l = 0; l <= unet.layers_per_block; ++l) {
      const int64_t skip_c = l == unet.layers_per_block ? in_c : o;
      const int64_t res_in = l == 0 ? prev_c : o;
      block->resnets->push_back(ResnetBlock2D(res_in + skip_c, o, temb, groups, eps));
      if (cross) block->attentions->push_back(transformer(o, rev_heads[i]));
      block->motion_modules->push_back(motion_module(o));
    }
    if (i + 1 < levels) {
      block->upsamplers = block->register_module("upsamplers", torch::nn::ModuleList());
      block->upsamplers->push_back(Upsample2D(o));
    }
    up_blocks->push_back(block);
    prev_c = o;
  }

  conv_norm_out = register_module(
      "conv_norm_out", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, ch[0]).eps(eps)));
  conv_out = register_module(
      "conv_out", MakeConv2d(torch::nn::Conv2dOptions(ch[0], unet.out_channels, 3).padding(1)));
}

torch::Tensor UNet3DImpl::RunMotion(torch::nn::ModuleList list, size_t i, const torch::Tensor& x,
                                    int64_t frames) {
  auto* mm = list[i]->as<MotionModuleImpl>();
  const bool across = motion_.norm_across_frames;
  return MaybeCheckpoint(
      gradient_checkpointing_ == GradientCheckpointing::kFull,
      [mm, frames, across](const torch::Tensor& h) { return mm->forward(h, frames, across); }, x);
}

torch::Tensor UNet3DImpl::forward(const torch::Tensor& sample, const torch::Tensor& timesteps,
                                  const torch::Tensor& text) {
  TORCH_CHECK(sample.dim() == 5, "UNet3D: sample must be [B, C, F, H, W], got ", sample.sizes());
  const int64_t b = sample.size(0), frames = sample.size(2);
  TORCH_CHECK(timesteps.dim() == 1 && timesteps.size(0) == b, "UNet3D: timesteps must be [B]");
  TORCH_CHECK(text.dim() == 3 && text.size(0) == b, "UNet3D: text states must be [B, L, D]");
  const auto dtype = sample.scalar_type();
  // kResnets: the ResNets only (diffusers); kFull: ResNets, transformers and motion modules.
  const bool ckpt_resnets = gradient_checkpointing_ != GradientCheckpointing::kNone;
  const bool ckpt = gradient_checkpointing_ == GradientCheckpointing::kFull;

  auto features = TimestepFeatures(timesteps, unet_.block_out_channels[0], unet_.flip_sin_to_cos,
                                   unet_.freq_shift)
                      .to(dtype);
  auto emb = time_embedding(features);  // [B, temb], one per clip
  auto ctx = text.to(dtype);

  const int64_t channels = sample.size(1), height = sample.size(3), width = sample.size(4);
  auto x = channels_last_
               ? sample.permute({0, 2, 3, 4, 1})
                     .reshape({b * frames, height, width, channels})
                     .permute({0, 3, 1, 2})
               : sample.permute({0, 2, 1, 3, 4}).reshape({b * frames, channels, height, width});
  x = Conv2dIn(conv_in, x);

  auto resnet = [&](torch::nn::ModuleList list, size_t i, const torch::Tensor& h) {
    auto* r = list[i]->as<ResnetBlock2DImpl>();
    return MaybeCheckpoint(
        ckpt_resnets,
        [r, emb, frames](const torch::Tensor& in) { return r->forward(in, emb, frames); }, h);
  };
  auto attention = [&](torch::nn::ModuleList list, size_t i, const torch::Tensor& h) {
    auto* a = list[i]->as<Transformer2DImpl>();
    return MaybeCheckpoint(
        ckpt, [a, ctx, frames](const torch::Tensor& in) { return a->forward(in, ctx, frames); }, h);
  };

  std::vector<torch::Tensor> skips = {x};
  for (const auto& module : *down_blocks) {
    auto* block = module->as<UNetBlockImpl>();
    for (size_t l = 0; l < block->resnets->size(); ++l) {
      x = resnet(block->resnets, l, x);
      if (block->attentions) x = attention(block->attentions, l, x);
      x = RunMotion(block->motion_modules, l, x, frames);
      skips.push_back(x);
    }
    if (block->downsamplers) {
      x = block->downsamplers[0]->as<Downsample2DImpl>()->forward(x);
      skips.push_back(x);
    }
  }

  // The mid block is never checkpointed (as in AnimateDiff).
  x = mid_block->resnets[0]->as<ResnetBlock2DImpl>()->forward(x, emb, frames);
  x = mid_block->attentions[0]->as<Transformer2DImpl>()->forward(x, ctx, frames);
  if (mid_block->motion_modules) {
    x = mid_block->motion_modules[0]->as<MotionModuleImpl>()->forward(x, frames,
                                                                      motion_.norm_across_frames);
  }
  x = mid_block->resnets[1]->as<ResnetBlock2DImpl>()->forward(x, emb, frames);

  for (const auto& module : *up_blocks) {
    auto* block = module->as<UNetBlockImpl>();
    for (size_t l = 0; l < block->resnets->size(); ++l) {
      auto skip = skips.back();
      skips.pop_back();
      auto joined = torch::cat({x, skip}, 1);
      // cat keeps a common channels-last layout; this makes sure of it (a no-op then).
      if (channels_last_) joined = joined.contiguous(at::MemoryFormat::ChannelsLast);
      x = resnet(block->resnets, l, joined);
      if (block->attentions) x = attention(block->attentions, l, x);
      x = RunMotion(block->motion_modules, l, x, frames);
    }
    if (block->upsamplers) {
      // Upsample to the next skip's size (handles sizes that are not multiples of 2^levels).
      const auto& next = skips.back();
      x = block->upsamplers[0]->as<Upsample2DImpl>()->forward(x, {next.size(2), next.size(3)});
    }
  }

  x = Conv2dIn(conv_out, GroupNormSiluIn(conv_norm_out, x));
  return x.view({b, frames, x.size(1), x.size(2), x.size(3)}).permute({0, 2, 1, 3, 4});
}

std::vector<std::pair<std::string, torch::Tensor>> UNet3DImpl::MotionParameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    if (item.key().find("motion_modules.") != std::string::npos) {
      out.emplace_back(item.key(), item.value());
    }
  }
  return out;
}

void UNet3DImpl::set_channels_last(bool on) {
  torch::NoGradGuard no_grad;
  const auto format = on ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<torch::nn::Conv2dImpl>()) {
      conv->weight.set_data(conv->weight.contiguous(format));
    }
  }
  channels_last_ = on;
}

void UNet3DImpl::FreezeAllButMotionModules() {
  for (auto& item : named_parameters(/*recurse=*/true)) {
    item.value().set_requires_grad(item.key().find("motion_modules.") != std::string::npos);
  }
}

void UNet3DImpl::ExtendMotionPositions(int64_t frames) {
  if (frames <= motion_.max_seq_length) return;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* mm = module->as<MotionModuleImpl>()) mm->ExtendPositions(frames);
  }
  motion_.max_seq_length = frames;
}

void UNet3DImpl::ZeroInitMotionProjOut() {
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* mm = module->as<MotionModuleImpl>()) mm->ZeroInitProjOut();
  }
}

}  // namespace adctl

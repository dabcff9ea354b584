#include "worker/model/vae.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_errors.h"
#include "worker/model/config.h"
#include "worker/model/weights.h"

namespace adctl {

namespace {

using Json = nlohmann::json;
namespace F = torch::nn::functional;
constexpr double kEps = 1e-6;

torch::nn::GroupNorm MakeGroupNorm(int64_t groups, int64_t channels) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(kEps));
}

torch::nn::Conv2d MakeConv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                           int64_t padding = -1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(padding < 0 ? kernel / 2 : padding));
}

// ResnetBlock2D without a time embedding (temb_channels None).
class VaeResnetImpl : public torch::nn::Module {
 public:
  VaeResnetImpl(int64_t in, int64_t out, int64_t groups) {
    norm1 = register_module("norm1", MakeGroupNorm(groups, in));
    conv1 = register_module("conv1", MakeConv(in, out, 3));
    norm2 = register_module("norm2", MakeGroupNorm(groups, out));
    conv2 = register_module("conv2", MakeConv(out, out, 3));
    if (in != out) conv_shortcut = register_module("conv_shortcut", MakeConv(in, out, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = conv1(torch::silu(norm1(x)));
    h = conv2(torch::silu(norm2(h)));
    return (conv_shortcut ? conv_shortcut(x) : x) + h;
  }
  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
};
TORCH_MODULE(VaeResnet);

// diffusers Attention as UNetMidBlock2D builds it for the VAE: one head over all channels,
// biased projections, GroupNorm inside, residual.
class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(int64_t channels, int64_t groups) {
    group_norm = register_module("group_norm", MakeGroupNorm(groups, channels));
    to_q = register_module("to_q", torch::nn::Linear(channels, channels));
    to_k = register_module("to_k", torch::nn::Linear(channels, channels));
    to_v = register_module("to_v", torch::nn::Linear(channels, channels));
    to_out = register_module("to_out", torch::nn::ModuleList());
    out = torch::nn::Linear(channels, channels);
    to_out->push_back(out);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    auto t = group_norm(x).view({n, c, h * w}).transpose(1, 2);  // [N, HW, C]
    auto q = to_q(t), k = to_k(t), v = to_v(t);
    auto scores = torch::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(c)));
    auto o = out(torch::matmul(torch::softmax(scores, -1), v));
    return o.transpose(1, 2).reshape({n, c, h, w}) + x;
  }
  torch::nn::GroupNorm group_norm{nullptr};
  torch::nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, out{nullptr};
  torch::nn::ModuleList to_out;
};
TORCH_MODULE(VaeAttention);

// UNetMidBlock2D: resnet, (attention, resnet).
class VaeMidBlockImpl : public torch::nn::Module {
 public:
  VaeMidBlockImpl(int64_t channels, int64_t groups, bool attention) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    attentions = register_module("attentions", torch::nn::ModuleList());
    resnets->push_back(VaeResnet(channels, channels, groups));
    if (attention) attentions->push_back(VaeAttention(channels, groups));
    resnets->push_back(VaeResnet(channels, channels, groups));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = resnets[0]->as<VaeResnet>()->forward(x);
    if (!attentions->is_empty()) x = attentions[0]->as<VaeAttention>()->forward(x);
    return resnets[1]->as<VaeResnet>()->forward(x);
  }
  torch::nn::ModuleList resnets, attentions;
};
TORCH_MODULE(VaeMidBlock);

// DownEncoderBlock2D (downsample = stride-2 conv after a (0,1,0,1) pad) or UpDecoderBlock2D
// (upsample = nearest ×2 then a 3×3 conv).
class VaeLevelImpl : public torch::nn::Module {
 public:
  VaeLevelImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, bool down, bool resample)
      : down_(down) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i)
      resnets->push_back(VaeResnet(i == 0 ? in : out, out, groups));
    if (resample) {
      auto holder = std::make_shared<torch::nn::Module>();
      conv = holder->register_module("conv",
                                     down ? MakeConv(out, out, 3, 2, 0) : MakeConv(out, out, 3));
      auto list = torch::nn::ModuleList();
      list->push_back(holder);
      register_module(down ? "downsamplers" : "upsamplers", list);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& r : *resnets) x = r->as<VaeResnet>()->forward(x);
    if (!conv) return x;
    if (down_) return conv(F::pad(x, F::PadFuncOptions({0, 1, 0, 1})));
    return conv(F::interpolate(x, F::InterpolateFuncOptions()
                                      .scale_factor(std::vector<double>{2.0, 2.0})
                                      .mode(torch::kNearest)));
  }
  torch::nn::ModuleList resnets;
  torch::nn::Conv2d conv{nullptr};

 private:
  bool down_;
};
TORCH_MODULE(VaeLevel);

class VaeCoderImpl : public torch::nn::Module {
 public:
  // encoder: in_channels → 2·latent; decoder: latent → out_channels.
  VaeCoderImpl(const VaeConfig& c, bool encoder) : encoder_(encoder) {
    const auto& ch = c.block_out_channels;
    const int64_t levels = static_cast<int64_t>(ch.size());
    const int64_t g = c.norm_num_groups;
    blocks = torch::nn::ModuleList();
    if (encoder) {
      conv_in = register_module("conv_in", MakeConv(c.in_channels, ch[0], 3));
      for (int64_t i = 0; i < levels; ++i) {
        blocks->push_back(VaeLevel(i == 0 ? ch[0] : ch[i - 1], ch[i], c.layers_per_block, g,
                                   /*down=*/true, i != levels - 1));
      }
      register_module("down_blocks", blocks);
      mid_block =
          register_module("mid_block", VaeMidBlock(ch.back(), g, c.mid_block_add_attention));
      conv_norm_out = register_module("conv_norm_out", MakeGroupNorm(g, ch.back()));
      conv_out = register_module("conv_out", MakeConv(ch.back(), 2 * c.latent_channels, 3));
    } else {
      conv_in = register_module("conv_in", MakeConv(c.latent_channels, ch.back(), 3));
      mid_block =
          register_module("mid_block", VaeMidBlock(ch.back(), g, c.mid_block_add_attention));
      int64_t out = ch.back();
      for (int64_t i = 0; i < levels; ++i) {
        const int64_t prev = out;
        out = ch[levels - 1 - i];
        blocks->push_back(
            VaeLevel(prev, out, c.layers_per_block + 1, g, /*down=*/false, i != levels - 1));
      }
      register_module("up_blocks", blocks);
      conv_norm_out = register_module("conv_norm_out", MakeGroupNorm(g, ch[0]));
      conv_out = register_module("conv_out", MakeConv(ch[0], c.out_channels, 3));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = conv_in(x);
    if (!encoder_) x = mid_block(x);
    for (auto& b : *blocks) x = b->as<VaeLevel>()->forward(x);
    if (encoder_) x = mid_block(x);
    return conv_out(torch::silu(conv_norm_out(x)));
  }
  torch::nn::Conv2d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList blocks;
  VaeMidBlock mid_block{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};

 private:
  bool encoder_;
};
TORCH_MODULE(VaeCoder);

// Older diffusers files name the mid-block attention's projections differently.
std::string RenameLegacyVaeKey(const std::string& key) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {".attentions.0.query.", ".attentions.0.to_q."},
      {".attentions.0.key.", ".attentions.0.to_k."},
      {".attentions.0.value.", ".attentions.0.to_v."},
      {".attentions.0.proj_attn.", ".attentions.0.to_out.0."},
  };
  for (const auto& [from, to] : kRenames) {
    const auto pos = key.find(from);
    if (pos != std::string::npos) {
      return key.substr(0, pos) + to + key.substr(pos + std::string(from).size());
    }
  }
  return key;
}

}  // namespace

Result<VaeConfig> ParseVaeConfig(const std::string& json_text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + JsonErrorWithoutContent(e));
  }
  VaeConfig c;
  try {
    const std::string cls = j.value("_class_name", "AutoencoderKL");
    if (cls != "AutoencoderKL") {
      return InvalidArgument(where + ": _class_name is '" + cls + "', expected AutoencoderKL");
    }
    c.in_channels = j.value("in_channels", c.in_channels);
    c.out_channels = j.value("out_channels", c.out_channels);
    c.latent_channels = j.value("latent_channels", c.latent_channels);
    if (j.contains("block_out_channels")) {
      c.block_out_channels = j["block_out_channels"].get<std::vector<int64_t>>();
    }
    c.layers_per_block = j.value("layers_per_block", c.layers_per_block);
    c.norm_num_groups = j.value("norm_num_groups", c.norm_num_groups);
    if (j.contains("scaling_factor") && !j["scaling_factor"].is_null()) {
      c.scaling_factor = j["scaling_factor"].get<double>();
    }
    if (j.contains("shift_factor") && !j["shift_factor"].is_null() &&
        j["shift_factor"].get<double>() != 0) {
      return InvalidArgument(where +
                             ": shift_factor is set; only SD-style VAEs (no shift) are "
                             "supported");
    }
    c.use_quant_conv = j.value("use_quant_conv", true);
    c.use_post_quant_conv = j.value("use_post_quant_conv", true);
    c.mid_block_add_attention = j.value("mid_block_add_attention", true);
    c.sample_size = j.value("sample_size", c.sample_size);
    const std::string act = j.value("act_fn", std::string("silu"));
    if (act != "silu") return InvalidArgument(where + ": act_fn '" + act + "', expected silu");
    for (const char* key : {"down_block_types", "up_block_types"}) {
      if (!j.contains(key)) continue;
      const auto types = j[key].get<std::vector<std::string>>();
      const std::string want =
          std::string(key) == "down_block_types" ? "DownEncoderBlock2D" : "UpDecoderBlock2D";
      if (types.size() != c.block_out_channels.size()) {
        return InvalidArgument(where + ": " + key + " needs one entry per block_out_channels");
      }
      for (const auto& t : types) {
        if (t != want) {
          return InvalidArgument(where + ": " + key + " has '" + t + "', only " + want +
                                 " is supported");
        }
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + JsonErrorWithoutContent(e));
  }
  if (c.block_out_channels.empty()) return InvalidArgument(where + ": block_out_channels is empty");
  for (int64_t ch : c.block_out_channels) {
    if (ch <= 0 || ch % c.norm_num_groups != 0) {
      return InvalidArgument(where + ": block_out_channels entry " + std::to_string(ch) +
                             " is not a positive multiple of norm_num_groups");
    }
  }
  return c;
}

std::string VaeConfigToJson(const VaeConfig& c) {
  const std::vector<std::string> down(c.block_out_channels.size(), "DownEncoderBlock2D");
  const std::vector<std::string> up(c.block_out_channels.size(), "UpDecoderBlock2D");
  Json j = {{"_class_name", "AutoencoderKL"},
            {"_diffusers_version", "0.30.0"},
            {"act_fn", "silu"},
            {"block_out_channels", c.block_out_channels},
            {"down_block_types", down},
            {"up_block_types", up},
            {"force_upcast", true},
            {"in_channels", c.in_channels},
            {"out_channels", c.out_channels},
            {"latent_channels", c.latent_channels},
            {"latents_mean", nullptr},
            {"latents_std", nullptr},
            {"layers_per_block", c.layers_per_block},
            {"mid_block_add_attention", c.mid_block_add_attention},
            {"norm_num_groups", c.norm_num_groups},
            {"sample_size", c.sample_size},
            {"scaling_factor", c.scaling_factor},
            {"shift_factor", nullptr},
            {"use_post_quant_conv", c.use_post_quant_conv},
            {"use_quant_conv", c.use_quant_conv}};
  return j.dump(2) + "\n";
}

AutoencoderKLImpl::AutoencoderKLImpl(const VaeConfig& c) : config_(c) {
  encoder_ = register_module("encoder", VaeCoder(c, true).ptr());
  decoder_ = register_module("decoder", VaeCoder(c, false).ptr());
  const int64_t l = c.latent_channels;
  if (c.use_quant_conv) quant_conv = register_module("quant_conv", MakeConv(2 * l, 2 * l, 1));
  if (c.use_post_quant_conv) {
    post_quant_conv = register_module("post_quant_conv", MakeConv(l, l, 1));
  }
}

LatentDistribution AutoencoderKLImpl::Encode(const torch::Tensor& images) {
  auto moments = std::static_pointer_cast<VaeCoderImpl>(encoder_)->forward(images);
  if (quant_conv) moments = quant_conv(moments);
  auto parts = moments.chunk(2, 1);
  return {parts[0], parts[1].clamp(-30.0, 20.0)};
}

torch::Tensor AutoencoderKLImpl::Decode(const torch::Tensor& latents) {
  auto z = post_quant_conv ? post_quant_conv(latents) : latents;
  return std::static_pointer_cast<VaeCoderImpl>(decoder_)->forward(z);
}

LatentDistribution AutoencoderKLImpl::EncodeChunked(const torch::Tensor& images, int64_t chunk) {
  if (chunk <= 0 || images.size(0) <= chunk) return Encode(images);
  std::vector<torch::Tensor> means, logvars;
  for (int64_t i = 0; i < images.size(0); i += chunk) {
    auto d = Encode(images.slice(0, i, std::min(i + chunk, images.size(0))));
    means.push_back(d.mean);
    logvars.push_back(d.logvar);
  }
  return {torch::cat(means), torch::cat(logvars)};
}

torch::Tensor AutoencoderKLImpl::DecodeChunked(const torch::Tensor& latents, int64_t chunk) {
  if (chunk <= 0 || latents.size(0) <= chunk) return Decode(latents);
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < latents.size(0); i += chunk) {
    out.push_back(Decode(latents.slice(0, i, std::min(i + chunk, latents.size(0)))));
  }
  return torch::cat(out);
}

Result<AutoencoderKL> LoadAutoencoderKL(const std::string& dir) {
  auto text = ReadTextFile(dir + "/config.json");
  if (!text.ok()) return text.status();
  auto config = ParseVaeConfig(*text, dir + "/config.json");
  if (!config.ok()) return config.status();
  auto path = FindModelWeights(dir);
  if (!path.ok()) return path.status();
  auto tensors = ReadTensorFile(*path);
  if (!tensors.ok()) return tensors.status();
  TensorMap renamed;
  for (auto& [name, t] : *tensors) {
    const std::string key = RenameLegacyVaeKey(name);
    // Very old conversions stored the attention projections as 1×1 convs.
    renamed[key] =
        (key.find(".attentions.0.") != std::string::npos && t.dim() == 4) ? t.flatten(1) : t;
  }
  AutoencoderKL model(*config);
  ADCTL_RETURN_IF_ERROR(LoadStrict(
      *model, renamed, [](const std::string&) { return true; }, *path));
  model->eval();
  return model;
}

}  // namespace adctl

// Stable Diffusion's VAE: diffusers' `AutoencoderKL` (DownEncoderBlock2D / UpDecoderBlock2D),
// from config.json + safetensors, registered under diffusers' parameter names (the legacy
// mid-block attention names query/key/value/proj_attn are renamed on load).
//
// Encoder: conv_in → down blocks (ResNets without time embedding, a stride-2 conv padded
// (0,1,0,1) except at the last level) → mid block (ResNet, single-head self-attention,
// ResNet) → GroupNorm, SiLU, conv_out → quant_conv → latent mean and log-variance (clamped to
// [−30, 20]). Decoder: post_quant_conv → conv_in → mid block → up blocks (one more ResNet per
// level, nearest ×2 + conv) → GroupNorm, SiLU, conv_out. GroupNorm eps is 1e-6 throughout.
// Frames are encoded and decoded in chunks, so a 16×512² clip fits on one GPU. Reference:
// diffusers models/autoencoders/{autoencoder_kl,vae}.py, unets/unet_2d_blocks.py. Inference
// only; thread-compatible.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

struct VaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t latent_channels = 4;
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  int64_t layers_per_block = 2;
  int64_t norm_num_groups = 32;
  double scaling_factor = 0.18215;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  int64_t sample_size = 256;
};

Result<VaeConfig> ParseVaeConfig(const std::string& json_text, const std::string& where);
std::string VaeConfigToJson(const VaeConfig& c);

struct LatentDistribution {
  torch::Tensor mean;    // [N, latent_channels, H/f, W/f]
  torch::Tensor logvar;  // same shape, clamped to [−30, 20]
};

class AutoencoderKLImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLImpl(const VaeConfig& c);
  // images [N, 3, H, W] in [−1, 1] → the latent distribution (unscaled).
  LatentDistribution Encode(const torch::Tensor& images);
  // latents [N, C, h, w] (unscaled: divide by scaling_factor first) → images in about [−1, 1].
  torch::Tensor Decode(const torch::Tensor& latents);
  // The same, `chunk` images at a time (≤ 0: all at once).
  LatentDistribution EncodeChunked(const torch::Tensor& images, int64_t chunk);
  torch::Tensor DecodeChunked(const torch::Tensor& latents, int64_t chunk);
  const VaeConfig& config() const { return config_; }
  // Spatial down-sampling factor (8 for SD).
  int64_t scale_factor() const { return int64_t{1} << (config_.block_out_channels.size() - 1); }

 private:
  VaeConfig config_;
  std::shared_ptr<torch::nn::Module> encoder_, decoder_;
  torch::nn::Conv2d quant_conv{nullptr}, post_quant_conv{nullptr};
};
TORCH_MODULE(AutoencoderKL);

// Loads a diffusers VAE folder (config.json + diffusion_pytorch_model[.fp16].safetensors)
// strictly; weights are converted to fp32.
Result<AutoencoderKL> LoadAutoencoderKL(const std::string& dir);

}  // namespace adctl

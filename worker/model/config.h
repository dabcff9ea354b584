// Model configurations, read from diffusers' config.json files.
//
// `UNetConfig` is the SD-style UNet2DConditionModel family (any block counts, channels, heads,
// norm groups, cross-attention width); `MotionConfig` is a MotionAdapter's. Both come from
// `config.json` (UNet2DConditionModel, MotionAdapter or the combined UNetMotionModel) and are
// checked against the weights' shapes when loading (weights.h). Plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

struct UNetConfig {
  int64_t in_channels = 4;
  int64_t out_channels = 4;
  std::vector<int64_t> block_out_channels = {320, 640, 1280, 1280};
  // "CrossAttnDownBlock2D" / "DownBlock2D" (the Motion variants map onto these).
  std::vector<std::string> down_block_types;
  std::vector<std::string> up_block_types;
  int64_t layers_per_block = 2;
  // Heads per level. diffusers' legacy `attention_head_dim` holds the head count.
  std::vector<int64_t> attention_heads = {8, 8, 8, 8};
  int64_t cross_attention_dim = 768;
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;
  bool flip_sin_to_cos = true;
  double freq_shift = 0;
  int64_t downsample_padding = 1;
  bool use_linear_projection = false;
  bool has_mid_block = true;  // UNetMidBlock2DCrossAttn

  bool HasCrossAttention(size_t level, bool up) const;
  int64_t time_embed_dim() const { return block_out_channels[0] * 4; }
};

struct MotionConfig {
  int64_t layers_per_block = 2;  // down blocks; up blocks have one more
  int64_t num_attention_heads = 8;
  int64_t norm_num_groups = 32;
  int64_t max_seq_length = 32;
  bool use_mid_block = true;  // v2 layout
  int64_t transformer_layers_per_block = 1;
  // GroupNorm scope of the motion module's input norm: true = statistics span all frames of a
  // clip (diffusers), false = per frame (original AnimateDiff). spec §2.5.
  bool norm_across_frames = true;
  // The scope a config.json records (`motion_norm`, written by adctl): "" when it records none.
  std::string recorded_norm;
};

// Parses a config.json of class UNet2DConditionModel or UNetMotionModel.
Result<UNetConfig> ParseUNetConfig(const std::string& json_text, const std::string& where);
// Parses a MotionAdapter config.json, or the motion fields of a UNetMotionModel one.
Result<MotionConfig> ParseMotionConfig(const std::string& json_text, const std::string& where);
Result<std::string> ReadTextFile(const std::string& path);

// config.json texts in diffusers' format, so what we write loads in diffusers.
std::string UNetConfigToJson(const UNetConfig& c);
std::string MotionAdapterConfigToJson(const UNetConfig& unet, const MotionConfig& m);

// The `tiny` preset: SD-shaped, small channels (for demos and tests).
UNetConfig TinyUNetConfig();
// The motion modules of a preset's layout: v1 holds 24 positions, v2 and v3 32; v2 alone has a
// mid-block motion module.
MotionConfig TinyMotionConfig(PresetLayout layout);
// The `sd15` preset: Stable Diffusion 1.5's UNet and AnimateDiff's motion modules at their real
// sizes with random weights (benchmarks without downloading checkpoints; spec §1.1, §2.2).
UNetConfig Sd15UNetConfig();
MotionConfig Sd15MotionConfig(PresetLayout layout);

}  // namespace adctl

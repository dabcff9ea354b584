#include "worker/model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/json_errors.h"

namespace adctl {
namespace {

using Json = nlohmann::json;

Status Unsupported(const std::string& where, const std::string& field, const Json& value) {
  return InvalidArgument(where + ": " + field + " = " + value.dump() +
                         " is not supported by adctl's UNet");
}

std::string Strip(const std::string& type) {
  // UNetMotionModel's block types name the same 2D blocks with a "Motion" suffix.
  static const std::pair<const char*, const char*> kMap[] = {
      {"CrossAttnDownBlockMotion", "CrossAttnDownBlock2D"},
      {"DownBlockMotion", "DownBlock2D"},
      {"CrossAttnUpBlockMotion", "CrossAttnUpBlock2D"},
      {"UpBlockMotion", "UpBlock2D"},
  };
  for (const auto& [from, to] : kMap) {
    if (type == from) return to;
  }
  return type;
}

bool IsNull(const Json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }

}  // namespace

bool UNetConfig::HasCrossAttention(size_t level, bool up) const {
  const auto& types = up ? up_block_types : down_block_types;
  return types.at(level).rfind("CrossAttn", 0) == 0;
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<UNetConfig> ParseUNetConfig(const std::string& json_text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + JsonErrorWithoutContent(e));
  }
  UNetConfig c;
  try {
    const std::string cls = j.value("_class_name", "UNet2DConditionModel");
    if (cls != "UNet2DConditionModel" && cls != "UNetMotionModel") {
      return InvalidArgument(where + ": _class_name is '" + cls +
                             "', expected UNet2DConditionModel or UNetMotionModel");
    }
    c.in_channels = j.value("in_channels", c.in_channels);
    c.out_channels = j.value("out_channels", c.out_channels);
    if (j.contains("block_out_channels")) {
      c.block_out_channels = j["block_out_channels"].get<std::vector<int64_t>>();
    }
    const size_t levels = c.block_out_channels.size();
    for (const auto& t : j.at("down_block_types")) c.down_block_types.push_back(Strip(t));
    for (const auto& t : j.at("up_block_types")) c.up_block_types.push_back(Strip(t));
    if (c.down_block_types.size() != levels || c.up_block_types.size() != levels) {
      return InvalidArgument(where +
                             ": down_block_types and up_block_types need one entry per "
                             "block_out_channels entry (" +
                             std::to_string(levels) + ")");
    }
    for (const auto& t : c.down_block_types) {
      if (t != "CrossAttnDownBlock2D" && t != "DownBlock2D") {
        return Unsupported(where, "down_block_types", t);
      }
    }
    for (const auto& t : c.up_block_types) {
      if (t != "CrossAttnUpBlock2D" && t != "UpBlock2D")
        return Unsupported(where, "up_block_types", t);
    }
    if (j.contains("layers_per_block")) {
      if (!j["layers_per_block"].is_number_integer()) {
        return Unsupported(where, "layers_per_block", j["layers_per_block"]);
      }
      c.layers_per_block = j["layers_per_block"];
    }
    // Head count: num_attention_heads if set, else the legacy attention_head_dim.
    Json heads = !IsNull(j, "num_attention_heads")  ? j["num_attention_heads"]
                 : j.contains("attention_head_dim") ? j["attention_head_dim"]
                                                    : Json(8);
    if (heads.is_number_integer()) {
      c.attention_heads.assign(levels, heads.get<int64_t>());
    } else {
      c.attention_heads = heads.get<std::vector<int64_t>>();
      if (c.attention_heads.size() != levels) {
        return InvalidArgument(where + ": attention heads list needs one entry per level");
      }
    }
    c.cross_attention_dim = j.value("cross_attention_dim", c.cross_attention_dim);
    c.norm_num_groups = j.value("norm_num_groups", c.norm_num_groups);
    c.norm_eps = j.value("norm_eps", c.norm_eps);
    c.flip_sin_to_cos = j.value("flip_sin_to_cos", c.flip_sin_to_cos);
    c.freq_shift = j.value("freq_shift", c.freq_shift);
    c.downsample_padding = j.value("downsample_padding", c.downsample_padding);
    if (c.downsample_padding != 1)
      return Unsupported(where, "downsample_padding", c.downsample_padding);
    c.use_linear_projection = j.value("use_linear_projection", false);
    if (cls == "UNet2DConditionModel") {
      const std::string mid = j.value("mid_block_type", std::string("UNetMidBlock2DCrossAttn"));
      if (mid != "UNetMidBlock2DCrossAttn") return Unsupported(where, "mid_block_type", mid);
    }
    for (const char* key : {"class_embed_type", "addition_embed_type", "time_cond_proj_dim",
                            "encoder_hid_dim", "time_embedding_act_fn", "timestep_post_act"}) {
      if (!IsNull(j, key)) return Unsupported(where, key, j[key]);
    }
    if (j.value("resnet_time_scale_shift", std::string("default")) != "default") {
      return Unsupported(where, "resnet_time_scale_shift", j["resnet_time_scale_shift"]);
    }
    if (j.contains("transformer_layers_per_block") &&
        !(j["transformer_layers_per_block"].is_number_integer() &&
          j["transformer_layers_per_block"].get<int64_t>() == 1)) {
      return Unsupported(where, "transformer_layers_per_block", j["transformer_layers_per_block"]);
    }
    if (j.value("time_embedding_type", std::string("positional")) != "positional") {
      return Unsupported(where, "time_embedding_type", j["time_embedding_type"]);
    }
    for (size_t i = 0; i < levels; ++i) {
      if (c.block_out_channels[i] % c.norm_num_groups != 0) {
        return InvalidArgument(where + ": block_out_channels[" + std::to_string(i) +
                               "] = " + std::to_string(c.block_out_channels[i]) +
                               " is not divisible by norm_num_groups " +
                               std::to_string(c.norm_num_groups));
      }
      if (c.block_out_channels[i] % c.attention_heads[i] != 0) {
        return InvalidArgument(where + ": block_out_channels[" + std::to_string(i) +
                               "] is not divisible by the head count");
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": bad field: " + JsonErrorWithoutContent(e));
  }
  return c;
}

Result<MotionConfig> ParseMotionConfig(const std::string& json_text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + JsonErrorWithoutContent(e));
  }
  MotionConfig m;
  try {
    const std::string cls = j.value("_class_name", "MotionAdapter");
    if (cls == "MotionAdapter") {
      m.layers_per_block = j.value("motion_layers_per_block", m.layers_per_block);
      m.norm_num_groups = j.value("motion_norm_num_groups", m.norm_num_groups);
      if (j.value("motion_transformer_layers_per_block", 1) != 1 ||
          j.value("motion_transformer_layers_per_mid_block", 1) != 1 ||
          j.value("motion_mid_block_layers_per_block", 1) != 1) {
        return InvalidArgument(where +
                               ": only one transformer layer per motion module is supported");
      }
      if (!IsNull(j, "conv_in_channels"))
        return Unsupported(where, "conv_in_channels", j["conv_in_channels"]);
    } else if (cls == "UNetMotionModel") {
      m.layers_per_block = j.value("layers_per_block", m.layers_per_block);
      m.norm_num_groups = j.value("norm_num_groups", m.norm_num_groups);
      if (!IsNull(j, "reverse_motion_num_attention_heads") ||
          j.value("temporal_transformer_layers_per_block", 1) != 1 ||
          j.value("temporal_transformer_layers_per_mid_block", 1) != 1) {
        return InvalidArgument(where +
                               ": only one transformer layer per motion module is supported");
      }
    } else {
      return InvalidArgument(where + ": _class_name is '" + cls +
                             "', expected MotionAdapter or UNetMotionModel");
    }
    m.num_attention_heads = j.value("motion_num_attention_heads", m.num_attention_heads);
    m.max_seq_length = j.value("motion_max_seq_length", m.max_seq_length);
    m.use_mid_block = j.value("use_motion_mid_block", m.use_mid_block);
    m.recorded_norm = j.value("motion_norm", std::string());
    if (!m.recorded_norm.empty() && m.recorded_norm != "per_frame" &&
        m.recorded_norm != "across_frames") {
      return InvalidArgument(where + ": motion_norm must be 'per_frame' or 'across_frames', got '" +
                             m.recorded_norm + "'");
    }
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": bad field: " + JsonErrorWithoutContent(e));
  }
  return m;
}

std::string UNetConfigToJson(const UNetConfig& c) {
  Json j = {
      {"_class_name", "UNet2DConditionModel"},
      {"_diffusers_version", "0.30.0"},
      {"act_fn", "silu"},
      {"attention_head_dim", c.attention_heads},
      {"block_out_channels", c.block_out_channels},
      {"center_input_sample", false},
      {"cross_attention_dim", c.cross_attention_dim},
      {"down_block_types", c.down_block_types},
      {"downsample_padding", c.downsample_padding},
      {"flip_sin_to_cos", c.flip_sin_to_cos},
      {"freq_shift", c.freq_shift},
      {"in_channels", c.in_channels},
      {"layers_per_block", c.layers_per_block},
      {"mid_block_scale_factor", 1},
      {"mid_block_type", "UNetMidBlock2DCrossAttn"},
      {"norm_eps", c.norm_eps},
      {"norm_num_groups", c.norm_num_groups},
      {"out_channels", c.out_channels},
      {"sample_size", 32},
      {"up_block_types", c.up_block_types},
      {"use_linear_projection", c.use_linear_projection},
  };
  return j.dump(2) + "\n";
}

std::string MotionAdapterConfigToJson(const UNetConfig& unet, const MotionConfig& m) {
  Json j = {
      {"_class_name", "MotionAdapter"},
      {"_diffusers_version", "0.30.0"},
      {"block_out_channels", unet.block_out_channels},
      {"conv_in_channels", nullptr},
      {"motion_layers_per_block", m.layers_per_block},
      {"motion_max_seq_length", m.max_seq_length},
      {"motion_mid_block_layers_per_block", 1},
      {"motion_norm_num_groups", m.norm_num_groups},
      {"motion_num_attention_heads", m.num_attention_heads},
      {"motion_transformer_layers_per_block", 1},
      {"motion_transformer_layers_per_mid_block", 1},
      {"use_motion_mid_block", m.use_mid_block},
      // adctl's addition (diffusers ignores unknown keys): the GroupNorm scope it trained with.
      {"motion_norm", m.norm_across_frames ? "across_frames" : "per_frame"},
  };
  return j.dump(2) + "\n";
}

UNetConfig TinyUNetConfig() {
  UNetConfig c;
  c.block_out_channels = {32, 64};
  c.down_block_types = {"CrossAttnDownBlock2D", "DownBlock2D"};
  c.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D"};
  c.layers_per_block = 1;
  c.attention_heads = {2, 2};
  c.cross_attention_dim = 32;
  c.norm_num_groups = 8;
  return c;
}

namespace {

// What the three layouts change; the presets differ in sizes only.
void SetPresetLayout(PresetLayout layout, MotionConfig& m) {
  m.max_seq_length = layout == PresetLayout::kV1 ? 24 : 32;
  m.use_mid_block = layout == PresetLayout::kV2;
}

}  // namespace

MotionConfig TinyMotionConfig(PresetLayout layout) {
  MotionConfig m;
  m.layers_per_block = 1;
  m.num_attention_heads = 2;
  m.norm_num_groups = 8;
  SetPresetLayout(layout, m);
  return m;
}

UNetConfig Sd15UNetConfig() {
  UNetConfig c;
  c.block_out_channels = {320, 640, 1280, 1280};
  c.down_block_types = {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                        "DownBlock2D"};
  c.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                      "CrossAttnUpBlock2D"};
  c.layers_per_block = 2;
  c.attention_heads = {8, 8, 8, 8};
  c.cross_attention_dim = 768;
  c.norm_num_groups = 32;
  return c;
}

MotionConfig Sd15MotionConfig(PresetLayout layout) {
  MotionConfig m;
  m.layers_per_block = 2;
  m.num_attention_heads = 8;
  m.norm_num_groups = 32;
  SetPresetLayout(layout, m);
  return m;
}

}  // namespace adctl

#include "worker/tools/tiny_pretrained.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "worker/model/clip_text.h"
#include "worker/model/config.h"
#include "worker/model/unet3d.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"
#include "worker/text/clip_tokenizer.h"

namespace adctl {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return Internal(path.string() + ": write failed");
  return Status::Ok();
}

// Every parameter and buffer of `module`, optionally under a key prefix.
TensorMap StateDict(torch::nn::Module& module, const std::string& prefix = "") {
  TensorMap out;
  for (const auto& item : module.named_parameters(true)) out[prefix + item.key()] = item.value();
  for (const auto& item : module.named_buffers(true)) out[prefix + item.key()] = item.value();
  return out;
}

}  // namespace

Status MakeTinyPretrained(const std::string& out_dir, uint64_t seed, const std::string& shape,
                          const std::string& vocab) {
  if (shape != "tiny" && shape != "sd15") {
    return InvalidArgument("--shape: 'tiny' or 'sd15', got '" + shape + "'");
  }
  const bool sd15 = shape == "sd15";
  if (sd15 && vocab.empty()) {
    return InvalidArgument("--shape sd15 needs --vocab (CLIP's bpe_simple_vocab_16e6.txt.gz)");
  }
  // SD1.5's real sizes are stored as the fp16 variant users download (half the disk).
  const std::string weights =
      sd15 ? "diffusion_pytorch_model.fp16.safetensors" : "diffusion_pytorch_model.safetensors";
  auto half = [&](TensorMap m) {
    if (sd15) {
      for (auto& [k, t] : m) t = t.to(torch::kHalf);
    }
    return m;
  };
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  const fs::path root(out_dir);
  for (const char* sub : {"unet", "vae", "text_encoder", "tokenizer", "scheduler"}) {
    std::error_code ec;
    fs::create_directories(root / sub, ec);
    if (ec) return Internal((root / sub).string() + ": cannot create: " + ec.message());
  }

  const UNetConfig unet_config = sd15 ? Sd15UNetConfig() : TinyUNetConfig();
  {
    UNet3D unet(unet_config,
                sd15 ? Sd15MotionConfig(PresetLayout::kV2) : TinyMotionConfig(PresetLayout::kV2));
    if (sd15) {
      TensorMap twod;
      for (auto& [k, t] : StateDict(*unet)) {
        if (k.find("motion_modules.") == std::string::npos) twod[k] = t;
      }
      ADCTL_RETURN_IF_ERROR(WriteTensorFile((root / "unet" / weights).string(), half(twod)));
      ADCTL_RETURN_IF_ERROR(
          WriteText(root / "unet" / "config.json", UNetConfigToJson(unet_config)));
    } else {
      ADCTL_RETURN_IF_ERROR(SaveUNet2D(*unet, (root / "unet").string()));
    }
  }

  VaeConfig vae_config;  // SD1.5's by default
  if (!sd15) {
    vae_config.block_out_channels = {16, 32, 32};
    vae_config.layers_per_block = 1;
    vae_config.norm_num_groups = 8;
    vae_config.sample_size = 64;
  }
  AutoencoderKL vae(vae_config);
  ADCTL_RETURN_IF_ERROR(WriteTensorFile((root / "vae" / weights).string(), half(StateDict(*vae))));
  ADCTL_RETURN_IF_ERROR(WriteText(root / "vae" / "config.json", VaeConfigToJson(vae_config)));

  auto tokenizer = sd15 ? ClipTokenizer::Load(vocab) : MakeTinyClipTokenizer(1000);
  if (!tokenizer.ok()) return tokenizer.status();
  ADCTL_RETURN_IF_ERROR(WriteHfTokenizer(*tokenizer, (root / "tokenizer").string()));

  ClipTextConfig text_config;  // SD1.5's (CLIP ViT-L/14's text tower) by default
  text_config.vocab_size = tokenizer->vocab_size();
  text_config.eos_token_id = tokenizer->eot_id();
  if (!sd15) {
    text_config.hidden_size = unet_config.cross_attention_dim;
    text_config.intermediate_size = 4 * text_config.hidden_size;
    text_config.num_hidden_layers = 2;
    text_config.num_attention_heads = 4;
  }
  ClipTextModel text(text_config);
  // SD1.5's file keeps transformers' "text_model." prefix; the loaders accept both forms.
  ADCTL_RETURN_IF_ERROR(WriteTensorFile(
      (root / "text_encoder" / (sd15 ? "model.fp16.safetensors" : "model.safetensors")).string(),
      half(StateDict(*text, "text_model."))));
  ADCTL_RETURN_IF_ERROR(
      WriteText(root / "text_encoder" / "config.json", ClipTextConfigToJson(text_config)));

  const Json scheduler = {{"_class_name", "DDIMScheduler"},
                          {"_diffusers_version", "0.30.0"},
                          {"beta_schedule", "scaled_linear"},
                          {"beta_start", 0.00085},
                          {"beta_end", 0.012},
                          {"num_train_timesteps", 1000},
                          {"clip_sample", false},
                          {"set_alpha_to_one", false},
                          {"steps_offset", 1},
                          {"prediction_type", "epsilon"},
                          {"timestep_spacing", "leading"},
                          {"trained_betas", nullptr}};
  ADCTL_RETURN_IF_ERROR(
      WriteText(root / "scheduler" / "scheduler_config.json", scheduler.dump(2) + "\n"));
  const Json index = {{"_class_name", "StableDiffusionPipeline"},
                      {"_diffusers_version", "0.30.0"},
                      {"feature_extractor", {nullptr, nullptr}},
                      {"requires_safety_checker", false},
                      {"safety_checker", {nullptr, nullptr}},
                      {"scheduler", {"diffusers", "DDIMScheduler"}},
                      {"text_encoder", {"transformers", "CLIPTextModel"}},
                      {"tokenizer", {"transformers", "CLIPTokenizer"}},
                      {"unet", {"diffusers", "UNet2DConditionModel"}},
                      {"vae", {"diffusers", "AutoencoderKL"}}};
  return WriteText(root / "model_index.json", index.dump(2) + "\n");
}

}  // namespace adctl

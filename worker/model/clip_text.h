// Stable Diffusion's text encoder: transformers' `CLIPTextModel`, from its config.json and
// safetensors, registered under transformers' parameter names (the `text_model.` prefix of
// older files is stripped on load).
//
// Token embedding + learned positions → N pre-LayerNorm encoder layers (causal self-attention,
// MLP with quick_gelu or gelu) → final LayerNorm. Outputs the last hidden state ([B, L, D],
// what SD's UNet cross-attends to) and the pooled state at each sequence's first eos token.
// Reference: transformers models/clip/modeling_clip.py (CLIPTextTransformer). Inference only;
// thread-compatible.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

class ClipTokenizer;

enum class ClipActivation { kQuickGelu, kGelu };

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t max_position_embeddings = 77;
  double layer_norm_eps = 1e-5;
  ClipActivation hidden_act = ClipActivation::kQuickGelu;
  int64_t eos_token_id = 49407;
};

// Parses a CLIPTextModel config.json (errors name the file and field).
Result<ClipTextConfig> ParseClipTextConfig(const std::string& json_text, const std::string& where);
// The config.json transformers writes for `c` (so a folder we write loads in transformers).
std::string ClipTextConfigToJson(const ClipTextConfig& c);

struct ClipTextOutput {
  torch::Tensor last_hidden_state;  // [B, L, D]
  torch::Tensor pooled;             // [B, D], at the first eos token of each row
};

class ClipEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit ClipEncoderLayerImpl(const ClipTextConfig& c);
  // x [B, L, D]; mask [L, L] additive causal mask.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  int64_t heads_;
  ClipActivation act_;
  std::shared_ptr<torch::nn::Module> self_attn_, mlp_;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};
};
TORCH_MODULE(ClipEncoderLayer);

class ClipTextModelImpl : public torch::nn::Module {
 public:
  explicit ClipTextModelImpl(const ClipTextConfig& c);
  // input_ids [B, L] (int64, L ≤ max_position_embeddings).
  ClipTextOutput forward(const torch::Tensor& input_ids);
  const ClipTextConfig& config() const { return config_; }

 private:
  ClipTextConfig config_;
  std::shared_ptr<torch::nn::Module> embeddings_, encoder_;
  torch::nn::Embedding token_embedding{nullptr}, position_embedding{nullptr};
  torch::nn::ModuleList layers;
  torch::nn::LayerNorm final_layer_norm{nullptr};
};
TORCH_MODULE(ClipTextModel);

// Loads a transformers text-encoder folder (config.json + model.safetensors, or its
// model.fp16.safetensors variant) strictly; weights are converted to fp32.
Result<ClipTextModel> LoadClipTextModel(const std::string& dir);

// What Stable Diffusion's UNet cross-attends to for each caption: tokenised and padded to
// min(77, max_position_embeddings), encoded on the model's device, last_hidden_state [N, L, D].
torch::Tensor EncodeCaptions(ClipTextModelImpl& model, const ClipTokenizer& tokenizer,
                             const std::vector<std::string>& captions);

}  // namespace adctl

#include "worker/model/clip_text.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/json_errors.h"
#include "worker/model/config.h"
#include "worker/model/layers.h"
#include "worker/model/weights.h"
#include "worker/text/clip_tokenizer.h"

namespace adctl {

namespace {

using Json = nlohmann::json;

torch::nn::Linear MakeLinear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true));
}

torch::nn::LayerNorm MakeLayerNorm(int64_t dim, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps));
}

}  // namespace

Result<ClipTextConfig> ParseClipTextConfig(const std::string& json_text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + JsonErrorWithoutContent(e));
  }
  ClipTextConfig c;
  try {
    // A full CLIPModel config nests the text tower.
    if (j.contains("text_config") && j["text_config"].is_object()) j = j["text_config"];
    c.vocab_size = j.value("vocab_size", c.vocab_size);
    c.hidden_size = j.value("hidden_size", c.hidden_size);
    c.intermediate_size = j.value("intermediate_size", c.intermediate_size);
    c.num_hidden_layers = j.value("num_hidden_layers", c.num_hidden_layers);
    c.num_attention_heads = j.value("num_attention_heads", c.num_attention_heads);
    c.max_position_embeddings = j.value("max_position_embeddings", c.max_position_embeddings);
    c.layer_norm_eps = j.value("layer_norm_eps", c.layer_norm_eps);
    c.eos_token_id = j.value("eos_token_id", c.eos_token_id);
    const std::string act = j.value("hidden_act", std::string("quick_gelu"));
    if (act == "quick_gelu") {
      c.hidden_act = ClipActivation::kQuickGelu;
    } else if (act == "gelu") {
      c.hidden_act = ClipActivation::kGelu;
    } else {
      return InvalidArgument(where + ": hidden_act '" + act +
                             "' is not supported (quick_gelu or gelu)");
    }
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + JsonErrorWithoutContent(e));
  }
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 ||
      c.hidden_size % c.num_attention_heads != 0) {
    return InvalidArgument(where + ": hidden_size " + std::to_string(c.hidden_size) +
                           " is not a positive multiple of num_attention_heads " +
                           std::to_string(c.num_attention_heads));
  }
  return c;
}

std::string ClipTextConfigToJson(const ClipTextConfig& c) {
  Json j = {{"architectures", {"CLIPTextModel"}},
            {"model_type", "clip_text_model"},
            {"attention_dropout", 0.0},
            {"bos_token_id", c.eos_token_id - 1},
            {"eos_token_id", c.eos_token_id},
            {"pad_token_id", c.eos_token_id},
            {"hidden_act", c.hidden_act == ClipActivation::kGelu ? "gelu" : "quick_gelu"},
            {"hidden_size", c.hidden_size},
            {"initializer_factor", 1.0},
            {"initializer_range", 0.02},
            {"intermediate_size", c.intermediate_size},
            {"layer_norm_eps", c.layer_norm_eps},
            {"max_position_embeddings", c.max_position_embeddings},
            {"num_attention_heads", c.num_attention_heads},
            {"num_hidden_layers", c.num_hidden_layers},
            {"projection_dim", 512},
            {"torch_dtype", "float32"},
            {"vocab_size", c.vocab_size}};
  return j.dump(2) + "\n";
}

ClipEncoderLayerImpl::ClipEncoderLayerImpl(const ClipTextConfig& c)
    : heads_(c.num_attention_heads), act_(c.hidden_act) {
  const int64_t d = c.hidden_size;
  self_attn_ = register_module("self_attn", std::make_shared<torch::nn::Module>());
  q_proj = self_attn_->register_module("q_proj", MakeLinear(d, d));
  k_proj = self_attn_->register_module("k_proj", MakeLinear(d, d));
  v_proj = self_attn_->register_module("v_proj", MakeLinear(d, d));
  out_proj = self_attn_->register_module("out_proj", MakeLinear(d, d));
  layer_norm1 = register_module("layer_norm1", MakeLayerNorm(d, c.layer_norm_eps));
  mlp_ = register_module("mlp", std::make_shared<torch::nn::Module>());
  fc1 = mlp_->register_module("fc1", MakeLinear(d, c.intermediate_size));
  fc2 = mlp_->register_module("fc2", MakeLinear(c.intermediate_size, d));
  layer_norm2 = register_module("layer_norm2", MakeLayerNorm(d, c.layer_norm_eps));
}

torch::Tensor ClipEncoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t b = x.size(0), l = x.size(1), d = x.size(2), dh = d / heads_;
  auto h = LayerNormIn(layer_norm1, x);
  auto split = [&](const torch::Tensor& t) { return t.view({b, l, heads_, dh}).transpose(1, 2); };
  auto q = split(LinearIn(q_proj, h) * (1.0 / std::sqrt(static_cast<double>(dh))));
  auto k = split(LinearIn(k_proj, h));
  auto v = split(LinearIn(v_proj, h));
  auto scores = torch::matmul(q, k.transpose(-1, -2)) + mask.to(q.scalar_type());
  auto attn = torch::softmax(scores, -1);
  auto o = torch::matmul(attn, v).transpose(1, 2).reshape({b, l, d});
  auto y = x + LinearIn(out_proj, o);
  auto m = LinearIn(fc1, LayerNormIn(layer_norm2, y));
  m = act_ == ClipActivation::kQuickGelu ? m * torch::sigmoid(1.702 * m) : torch::gelu(m);
  return y + LinearIn(fc2, m);
}

ClipTextModelImpl::ClipTextModelImpl(const ClipTextConfig& c) : config_(c) {
  embeddings_ = register_module("embeddings", std::make_shared<torch::nn::Module>());
  token_embedding = embeddings_->register_module("token_embedding",
                                                 torch::nn::Embedding(c.vocab_size, c.hidden_size));
  position_embedding = embeddings_->register_module(
      "position_embedding", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
  encoder_ = register_module("encoder", std::make_shared<torch::nn::Module>());
  layers = encoder_->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(ClipEncoderLayer(c));
  final_layer_norm =
      register_module("final_layer_norm", MakeLayerNorm(c.hidden_size, c.layer_norm_eps));
}

ClipTextOutput ClipTextModelImpl::forward(const torch::Tensor& input_ids) {
  TORCH_CHECK(input_ids.dim() == 2, "CLIP text model: input_ids must be [B, L]");
  const int64_t l = input_ids.size(1);
  TORCH_CHECK(l <= config_.max_position_embeddings, "CLIP text model: ", l, " tokens, at most ",
              config_.max_position_embeddings);
  auto ids = input_ids.to(torch::kLong);
  auto positions = torch::arange(l, ids.options());
  auto x = token_embedding(ids) + position_embedding(positions).unsqueeze(0);
  // Causal mask: each token sees itself and the tokens before it.
  auto mask = torch::full({l, l}, -std::numeric_limits<float>::infinity(),
                          torch::TensorOptions().dtype(x.scalar_type()).device(x.device()))
                  .triu(1);
  for (auto& layer : *layers) x = layer->as<ClipEncoderLayer>()->forward(x, mask);
  x = LayerNormIn(final_layer_norm, x);
  // The first eos of each row (transformers' rule for eos_token_id != 2).
  auto eos = (ids == config_.eos_token_id).to(torch::kInt).argmax(-1);
  auto pooled = x.index({torch::arange(x.size(0), ids.options()), eos});
  return {x, pooled};
}

Result<ClipTextModel> LoadClipTextModel(const std::string& dir) {
  auto text = ReadTextFile(dir + "/config.json");
  if (!text.ok()) return text.status();
  auto config = ParseClipTextConfig(*text, dir + "/config.json");
  if (!config.ok()) return config.status();
  auto path = FindModelWeights(dir);
  if (!path.ok()) return path.status();
  auto tensors = ReadTensorFile(*path);
  if (!tensors.ok()) return tensors.status();
  TensorMap renamed;
  for (auto& [name, t] : *tensors) {
    std::string key = name.rfind("text_model.", 0) == 0 ? name.substr(11) : name;
    if (key == "embeddings.position_ids") continue;  // a buffer older files saved
    renamed[key] = t;
  }
  ClipTextModel model(*config);
  ADCTL_RETURN_IF_ERROR(LoadStrict(
      *model, renamed, [](const std::string&) { return true; }, *path));
  model->eval();
  return model;
}

torch::Tensor EncodeCaptions(ClipTextModelImpl& model, const ClipTokenizer& tokenizer,
                             const std::vector<std::string>& captions) {
  const int length = static_cast<int>(
      std::min<int64_t>(ClipTokenizer::kMaxLength, model.config().max_position_embeddings));
  std::vector<int64_t> ids;
  for (const auto& c : captions) {
    const auto row = tokenizer.EncodePadded(c, length);
    ids.insert(ids.end(), row.begin(), row.end());
  }
  const auto device = model.parameters().front().device();
  auto input =
      torch::tensor(ids, torch::kLong).view({static_cast<int64_t>(captions.size()), length});
  return model.forward(input.to(device)).last_hidden_state;
}

}  // namespace adctl

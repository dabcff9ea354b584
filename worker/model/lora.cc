#include "worker/model/lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "common/checkpoint_export.h"
#include "common/safetensors.h"
#include "worker/model/unet3d.h"
#include "worker/model/weights.h"

namespace adctl {

namespace {

constexpr char kLoraA[] = ".lora_A.weight";
constexpr char kLoraB[] = ".lora_B.weight";
constexpr char kDiffusersPrefix[] = "unet.";

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool InScope(const std::string& attention_path, LoraScope scope) {
  const bool motion = attention_path.find("motion_modules.") != std::string::npos;
  switch (scope) {
    case LoraScope::kMotion:
      return motion;
    case LoraScope::kSpatial:
      return !motion;
    case LoraScope::kBoth:
      return true;
  }
  return false;
}

// Every attention layer of the model with its diffusers module path, in module order.
std::vector<std::pair<std::string, AttentionImpl*>> AttentionLayers(UNet3DImpl& model) {
  std::vector<std::pair<std::string, AttentionImpl*>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (auto* attention = item.value()->as<AttentionImpl>()) {
      out.emplace_back(item.key(), attention);
    }
  }
  return out;
}

}  // namespace

torch::Tensor LoraLayer::Delta(const torch::Tensor& x, bool training) const {
  const auto dtype = x.scalar_type();
  auto a = A.scalar_type() == dtype ? A : A.to(dtype);
  auto b = B.scalar_type() == dtype ? B : B.to(dtype);
  auto in = dropout > 0 && training ? torch::dropout(x, dropout, /*train=*/true) : x;
  return torch::linear(torch::linear(in, a), b) * scale;
}

torch::Tensor AddLoraTerms(const torch::Tensor& y, const torch::Tensor& x,
                           const std::vector<const LoraLayer*>& layers, int64_t width,
                           bool training) {
  bool dropout = false;
  for (const LoraLayer* l : layers) dropout = dropout || (l && l->dropout > 0 && training);
  if (dropout) {
    std::vector<torch::Tensor> terms;
    for (const LoraLayer* l : layers) {
      terms.push_back(l ? l->Delta(x, training) : torch::zeros_like(y.narrow(-1, 0, width)));
    }
    return y + (terms.size() == 1 ? terms[0] : torch::cat(terms, -1));
  }
  const auto dtype = x.scalar_type();
  std::vector<torch::Tensor> a_rows;
  int64_t rank = 0;
  for (const LoraLayer* l : layers) {
    if (!l) continue;
    a_rows.push_back(l->A);
    rank += l->A.size(0);
  }
  std::vector<torch::Tensor> b_blocks;
  int64_t offset = 0;
  for (const LoraLayer* l : layers) {
    if (!l) {
      b_blocks.push_back(torch::zeros({width, rank}, y.options().dtype(torch::kFloat)));
      continue;
    }
    const int64_t r = l->A.size(0);
    b_blocks.push_back(torch::constant_pad_nd(l->B * l->scale, {offset, rank - offset - r}));
    offset += r;
  }
  auto a = a_rows.size() == 1 ? a_rows[0] : torch::cat(a_rows);
  auto b = b_blocks.size() == 1 ? b_blocks[0] : torch::cat(b_blocks);
  auto xa = torch::linear(x, a.scalar_type() == dtype ? a : a.to(dtype));
  const auto out = y.scalar_type();  // the base projection's output dtype
  auto y2 = y.reshape({-1, y.size(-1)});
  return torch::addmm(y2, xa.reshape({-1, rank}).to(out), b.to(out).t()).view(y.sizes());
}

Result<LoraAdapters> LoraAdapters::Attach(UNet3DImpl& model, const LoraSpec& spec, uint64_t seed) {
  LoraAdapters out;
  out.rank_ = spec.rank;
  out.alpha_ = spec.alpha > 0 ? spec.alpha : static_cast<double>(spec.rank);
  out.targets_ = spec.targets.empty() ? DefaultLoraTargets() : spec.targets;
  const double scale = out.alpha_ / static_cast<double>(out.rank_);
  std::set<std::string> matched;
  torch::NoGradGuard no_grad;
  // On the CPU from `seed`: every rank, on any device, draws the same adapters.
  auto generator = at::detail::createCPUGenerator(seed);
  for (const auto& [path, attention] : AttentionLayers(model)) {
    if (!InScope(path, spec.scope)) continue;
    for (const std::string& target : out.targets_) {
      std::shared_ptr<LoraLayer>* slot = attention->LoraSlot(target);
      if (slot == nullptr) {
        return InvalidArgument("model.lora.targets: '" + target +
                               "' is not an attention projection (to_q, to_k, to_v, to_out.0)");
      }
      const torch::Tensor& w = attention->ProjectionWeight(target);
      const int64_t out_features = w.size(0), in_features = w.size(1);
      if (spec.rank > std::min(in_features, out_features)) {
        return InvalidArgument("model.lora.rank: " + std::to_string(spec.rank) +
                               " is above the width of " + path + "." + target + " (" +
                               std::to_string(in_features) + " in, " +
                               std::to_string(out_features) + " out)");
      }
      auto layer = std::make_shared<LoraLayer>();
      const auto options = torch::TensorOptions().dtype(torch::kFloat).device(w.device());
      // PEFT's init, nn.Linear's: Kaiming-uniform with a = √5, i.e. U(−1/√in, 1/√in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
      layer->A = ((at::rand({spec.rank, in_features}, generator, torch::kFloat) * 2 - 1) * bound)
                     .to(options.device());
      layer->B = torch::zeros({out_features, spec.rank}, options);
      layer->A.set_requires_grad(true);
      layer->B.set_requires_grad(true);
      layer->scale = scale;
      layer->dropout = spec.dropout;
      *slot = layer;
      out.layers_.push_back({path + "." + target, layer});
      matched.insert(target);
    }
  }
  if (out.layers_.empty()) {
    return InvalidArgument("model.lora: no attention layer in scope '" + Name(spec.scope) +
                           "' (does the model have motion modules?)");
  }
  for (const std::string& target : out.targets_) {
    if (!matched.count(target)) {
      return InvalidArgument("model.lora.targets: '" + target +
                             "' matches no projection in scope '" + Name(spec.scope) + "'");
    }
  }
  return out;
}

Result<LoraAdapters> LoraAdapters::Load(UNet3DImpl& model, const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  auto tensors = ReadTensorFile(path);
  if (!tensors.ok()) return tensors.status();
  // module path → (A, B), from either layout.
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> found;
  bool animatediff = false;
  for (const auto& [key, tensor] : *tensors) {
    std::string module;
    bool is_a = false;
    if (key.rfind(kDiffusersPrefix, 0) == 0 && (EndsWith(key, kLoraA) || EndsWith(key, kLoraB))) {
      is_a = EndsWith(key, kLoraA);
      module = key.substr(std::string(kDiffusersPrefix).size(),
                          key.size() - std::string(kDiffusersPrefix).size() -
                              std::string(is_a ? kLoraA : kLoraB).size());
    } else if (AnimateDiffLoraKeyToModule(key, &module, &is_a)) {
      animatediff = true;
    } else {
      return InvalidArgument(path + ": tensor '" + key +
                             "' is not a LoRA tensor of diffusers' layout (unet.<module>.lora_A."
                             "weight) or AnimateDiff's (….processor.to_q_lora.down.weight)");
    }
    (is_a ? found[module].first : found[module].second) = tensor;
  }
  if (found.empty()) return InvalidArgument(path + ": holds no LoRA tensors");

  LoraAdapters out;
  // Rank and alpha: diffusers' metadata (alpha = rank when absent); AnimateDiff's loader adds
  // up · down at strength 1.
  const auto& first = found.begin()->second.first;
  out.rank_ = first.defined() ? first.size(0) : 0;
  out.alpha_ = static_cast<double>(out.rank_);
  auto it =
      animatediff ? (*file)->metadata().end() : (*file)->metadata().find(kDiffusersLoraMetadataKey);
  if (it != (*file)->metadata().end()) {
    nlohmann::json meta = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (meta.is_discarded() || !meta.is_object()) {
      return InvalidArgument(path + ": its " + std::string(kDiffusersLoraMetadataKey) +
                             " is not a JSON object");
    }
    if (meta.contains("unet.r") && meta["unet.r"].is_number_integer() &&
        meta["unet.r"].get<int64_t>() != out.rank_) {
      return InvalidArgument(path + ": its metadata says rank " +
                             std::to_string(meta["unet.r"].get<int64_t>()) +
                             " but its tensors have rank " + std::to_string(out.rank_));
    }
    if (meta.contains("unet.lora_alpha") && meta["unet.lora_alpha"].is_number()) {
      out.alpha_ = meta["unet.lora_alpha"].get<double>();
    }
  }
  const double scale = out.alpha_ / static_cast<double>(std::max<int64_t>(out.rank_, 1));

  std::set<std::string> targets;
  torch::NoGradGuard no_grad;
  for (const auto& [p, attention] : AttentionLayers(model)) {
    for (const std::string& projection : DefaultLoraTargets()) {
      const std::string module = p + "." + projection;
      auto it = found.find(module);
      if (it == found.end()) continue;
      const auto& [a, b] = it->second;
      if (!a.defined() || !b.defined()) {
        return InvalidArgument(path + ": " + module + " has only one of its two LoRA tensors");
      }
      const torch::Tensor& w = attention->ProjectionWeight(projection);
      if (a.dim() != 2 || b.dim() != 2 || a.size(0) != out.rank_ || b.size(1) != out.rank_ ||
          a.size(1) != w.size(1) || b.size(0) != w.size(0)) {
        return InvalidArgument(
            path + ": " + module + " has LoRA shapes [" + std::to_string(a.size(0)) + ", " +
            std::to_string(a.size(1)) + "] and [" + std::to_string(b.size(0)) + ", " +
            std::to_string(b.size(1)) + "]; the model's layer is " + std::to_string(w.size(0)) +
            " × " + std::to_string(w.size(1)) + " (rank " + std::to_string(out.rank_) + ")");
      }
      auto layer = std::make_shared<LoraLayer>();
      layer->A = a.to(w.device(), torch::kFloat).clone().set_requires_grad(true);
      layer->B = b.to(w.device(), torch::kFloat).clone().set_requires_grad(true);
      layer->scale = scale;
      *attention->LoraSlot(projection) = layer;
      out.layers_.push_back({module, layer});
      targets.insert(projection);
      found.erase(it);
    }
  }
  if (!found.empty()) {
    return InvalidArgument(path + ": " + std::to_string(found.size()) +
                           " LoRA layer(s) match no attention projection of the model, e.g. " +
                           found.begin()->first);
  }
  for (const std::string& t : DefaultLoraTargets()) {
    if (targets.count(t)) out.targets_.push_back(t);
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> LoraAdapters::Parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const Entry& e : layers_) {
    out.emplace_back(e.module + kLoraA, e.layer->A);
    out.emplace_back(e.module + kLoraB, e.layer->B);
  }
  return out;
}

Status LoraAdapters::Restore(const std::map<std::string, torch::Tensor>& diffusers_tensors) {
  torch::NoGradGuard no_grad;
  for (const Entry& e : layers_) {
    for (const auto& [suffix, live] :
         {std::pair<const char*, torch::Tensor>{kLoraA, e.layer->A}, {kLoraB, e.layer->B}}) {
      const std::string name = kDiffusersPrefix + e.module + suffix;
      auto it = diffusers_tensors.find(name);
      if (it == diffusers_tensors.end()) return NotFound("no tensor " + name);
      if (it->second.sizes() != live.sizes()) {
        return InvalidArgument(name + " has shape " + c10::str(it->second.sizes()) +
                               ", the adapter " + c10::str(live.sizes()));
      }
      live.copy_(it->second);
    }
  }
  if (diffusers_tensors.size() != 2 * layers_.size()) {
    return InvalidArgument("holds " + std::to_string(diffusers_tensors.size()) +
                           " LoRA tensors; the model's adapters are " +
                           std::to_string(2 * layers_.size()));
  }
  return Status::Ok();
}

void LoraAdapters::SetDropout(double p) {
  for (Entry& e : layers_) e.layer->dropout = p;
}

int64_t LoraAdapters::parameter_count() const {
  int64_t n = 0;
  for (const Entry& e : layers_) n += e.layer->A.numel() + e.layer->B.numel();
  return n;
}

std::map<std::string, torch::Tensor> LoraAdapters::DiffusersTensors(bool fold_alpha) const {
  std::map<std::string, torch::Tensor> out;
  for (const Entry& e : layers_) {
    const std::string name = kDiffusersPrefix + e.module;
    out[name + kLoraA] = e.layer->A.detach();
    out[name + kLoraB] = fold_alpha ? (e.layer->B * e.layer->scale).detach() : e.layer->B.detach();
  }
  return out;
}

std::map<std::string, std::string> LoraAdapters::DiffusersMetadata(bool fold_alpha) const {
  nlohmann::json targets = nlohmann::json::array();
  std::set<std::string> modules;
  for (const Entry& e : layers_) modules.insert(e.module);
  for (const std::string& m : modules) targets.push_back(m);
  const nlohmann::json meta = {
      {"unet.r", rank_},
      {"unet.lora_alpha", fold_alpha ? static_cast<double>(rank_) : alpha_},
      {"unet.target_modules", targets}};
  return {{"format", "pt"}, {kDiffusersLoraMetadataKey, meta.dump()}};
}

}  // namespace adctl

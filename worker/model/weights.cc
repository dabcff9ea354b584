#include "worker/model/weights.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/safetensors.h"

namespace adctl {
namespace fs = std::filesystem;

namespace {

Result<torch::ScalarType> ToTorch(DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::kF64:
      return torch::kDouble;
    case DType::kF32:
      return torch::kFloat;
    case DType::kF16:
      return torch::kHalf;
    case DType::kBF16:
      return torch::kBFloat16;
    case DType::kI64:
      return torch::kLong;
    case DType::kI32:
      return torch::kInt;
    case DType::kI16:
      return torch::kShort;
    case DType::kI8:
      return torch::kChar;
    case DType::kU8:
      return torch::kByte;
    case DType::kBool:
      return torch::kBool;
  }
  return InvalidArgument(where + ": unsupported dtype");
}

Result<DType> FromTorch(torch::ScalarType t, const std::string& where) {
  switch (t) {
    case torch::kDouble:
      return DType::kF64;
    case torch::kFloat:
      return DType::kF32;
    case torch::kHalf:
      return DType::kF16;
    case torch::kBFloat16:
      return DType::kBF16;
    case torch::kLong:
      return DType::kI64;
    case torch::kInt:
      return DType::kI32;
    case torch::kShort:
      return DType::kI16;
    case torch::kChar:
      return DType::kI8;
    case torch::kByte:
      return DType::kU8;
    case torch::kBool:
      return DType::kBool;
    default:
      return InvalidArgument(where + ": cannot store dtype " + std::string(c10::toString(t)));
  }
}

std::string ShapeString(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool IsMotionKey(const std::string& k) { return k.find("motion_modules.") != std::string::npos; }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Original AnimateDiff files carry no (or differently sized) position tables: ours stay, unless
// the file's are stretched ones (LoadStretchedPositionTables).
bool IsMotionWeight(const std::string& k) { return IsMotionKey(k) && !EndsWith(k, "pos_embed.pe"); }

// The positional tables an AnimateDiff file keeps, under diffusers' names (one a block).
TensorMap StoredPositionTables(const TensorMap& raw) {
  TensorMap tables;
  for (const auto& [k, t] : raw) {
    if (const auto name = AnimateDiffTableKeyToDiffusers(k); !name.empty()) tables[name] = t;
  }
  return tables;
}

// Loads an AnimateDiff file's tables where they are not the sinusoid `model` computed: an adctl
// export of modules whose table model.motion_max_frames interpolated keeps its positions.
// Released modules keep the sinusoid (in fp16, bf16 or fp32), which stays as computed.
void LoadStretchedPositionTables(UNet3DImpl& model, const TensorMap& tables) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_buffers(true)) {
    auto stored = tables.find(item.key());
    if (stored == tables.end() || stored->second.sizes() != item.value().sizes()) continue;
    const auto table = stored->second.to(item.value().device(), torch::kFloat);
    constexpr double kRounding = 1e-2;  // above bf16's rounding of values in [-1, 1]
    if ((table - item.value().to(torch::kFloat)).abs().max().item<double>() > kRounding) {
      item.value().copy_(table);
    }
  }
}

std::string FirstFew(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 5; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > 5) out += ", ... (" + std::to_string(keys.size()) + " in all)";
  return out;
}

}  // namespace

Result<std::string> FindModelWeights(const std::string& dir) {
  if (!fs::is_directory(dir)) return NotFound(dir + ": no such model directory");
  for (const char* name : {"diffusion_pytorch_model.safetensors", "model.safetensors",
                           "diffusion_pytorch_model.fp16.safetensors", "model.fp16.safetensors"}) {
    const auto p = fs::path(dir) / name;
    if (fs::exists(p)) return p.string();
  }
  std::string found;
  for (const auto& e : fs::directory_iterator(dir)) {
    found += (found.empty() ? "" : ", ") + e.path().filename().string();
  }
  return NotFound(dir + ": no diffusion_pytorch_model[.fp16].safetensors or " +
                  "model[.fp16].safetensors (found: " + (found.empty() ? "nothing" : found) +
                  "; .bin weights: convert them to safetensors)");
}

Result<TensorMap> ReadTensorFile(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  TensorMap out;
  for (const auto& info : (*file)->tensors()) {
    auto type = ToTorch(info.dtype, path);
    if (!type.ok()) return type.status();
    out[info.name] = torch::from_blob(const_cast<uint8_t*>(info.data), info.shape,
                                      torch::TensorOptions().dtype(*type))
                         .clone();
  }
  return out;
}

Status WriteTensorFile(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> keep;  // holds the CPU copies alive until written
  std::vector<TensorToWrite> items;
  for (const auto& [name, t] : tensors) {
    auto cpu = t.detach().to(torch::kCPU).contiguous();
    auto dtype = FromTorch(cpu.scalar_type(), path + ": " + name);
    if (!dtype.ok()) return dtype.status();
    keep.push_back(cpu);
    items.push_back({name, *dtype, cpu.sizes().vec(), cpu.data_ptr(),
                     static_cast<size_t>(cpu.numel() * cpu.element_size())});
  }
  return WriteSafetensors(path, items, metadata);
}

namespace {

// Tensors of an unpickled `torch.save` payload: a {name: tensor} dict, or one wrapped in
// {"state_dict": {...}}; non-tensor entries (epoch, global_step, animatediff_config) dropped.
Status CollectPickledTensors(const c10::IValue& value, const std::string& path, TensorMap& out) {
  if (!value.isGenericDict()) {
    return InvalidArgument(path + ": a PyTorch checkpoint holding " + value.tagKind() +
                           ", expected a dict of tensors");
  }
  const auto dict = value.toGenericDict();
  for (const auto& entry : dict) {
    if (entry.key().isString() && entry.key().toStringRef() == "state_dict") {
      return CollectPickledTensors(entry.value(), path, out);
    }
  }
  for (const auto& entry : dict) {
    if (!entry.key().isString() || !entry.value().isTensor()) continue;
    out[entry.key().toStringRef()] = entry.value().toTensor().contiguous();
  }
  return Status::Ok();
}

}  // namespace

Result<TensorMap> ReadMotionModuleFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": motion module file not found or unreadable");
  char magic[8] = {0};
  in.read(magic, sizeof(magic));
  const auto got = in.gcount();
  if (got >= 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0) {
    // torch.save's zip format (PyTorch >= 1.6): data.pkl plus one file per storage.
    in.seekg(0, std::ios::end);
    std::vector<char> bytes(static_cast<size_t>(in.tellg()));
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!in) return DataLoss(path + ": cannot read");
    c10::IValue value;
    try {
      value = torch::pickle_load(bytes);
    } catch (const std::exception& e) {
      // LibTorch's message may quote the pickle's bytes: not passed on.
      return InvalidArgument(path + ": a zip file but not a loadable PyTorch checkpoint");
    }
    TensorMap out;
    ADCTL_RETURN_IF_ERROR(CollectPickledTensors(value, path, out));
    if (out.empty()) return InvalidArgument(path + ": a PyTorch checkpoint without tensors");
    return out;
  }
  if (got >= 2 && static_cast<unsigned char>(magic[0]) == 0x80) {
    return InvalidArgument(path +
                           ": a legacy (pre-zip) PyTorch pickle; re-save it with torch.save in "
                           "PyTorch >= 1.6 or convert it to safetensors");
  }
  if (got == 8) {
    uint64_t header = 0;
    std::memcpy(&header, magic, 8);  // little-endian hosts only (x86, arm64)
    char first = 0;
    in.read(&first, 1);
    if (header > 1 && header < (uint64_t{100} << 20) && first == '{') return ReadTensorFile(path);
  }
  // What was found, never what it says: the file may be anything the daemon can read.
  in.clear();
  in.seekg(0, std::ios::end);
  const auto size = static_cast<long long>(in.tellg());
  return InvalidArgument(path + ": neither safetensors (a header length, then '{') nor a " +
                         "PyTorch .ckpt (a zip: 'PK') file (" + std::to_string(size) + " bytes)");
}

Status LoadStrict(torch::nn::Module& module, const TensorMap& tensors,
                  const std::function<bool(const std::string&)>& select, const std::string& where) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> used;
  auto visit = [&](const std::string& name, torch::Tensor& target) -> Status {
    if (!select(name)) return Status::Ok();
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      missing.push_back(name);
      return Status::Ok();
    }
    used.insert(name);
    if (it->second.sizes() != target.sizes()) {
      return InvalidArgument(where + ": tensor '" + name + "' has shape " +
                             ShapeString(it->second.sizes()) + ", the model expects " +
                             ShapeString(target.sizes()) +
                             " (config.json does not match the weights?)");
    }
    target.copy_(it->second);
    return Status::Ok();
  };
  for (auto& item : module.named_parameters(true))
    ADCTL_RETURN_IF_ERROR(visit(item.key(), item.value()));
  for (auto& item : module.named_buffers(true))
    ADCTL_RETURN_IF_ERROR(visit(item.key(), item.value()));
  for (const auto& [name, t] : tensors) {
    if (!used.count(name)) unexpected.push_back(name);
  }
  if (!missing.empty()) return InvalidArgument(where + ": missing tensors: " + FirstFew(missing));
  if (!unexpected.empty()) {
    return InvalidArgument(where + ": unexpected tensors: " + FirstFew(unexpected));
  }
  return Status::Ok();
}

Result<LoadedUNet> LoadUNet3D(const ModelSources& src, MotionNorm norm) {
  const bool combined = !src.unet_motion.empty();
  const std::string unet_dir = combined ? src.unet_motion : src.unet2d;
  if (unet_dir.empty()) return InvalidArgument("model: set unet2d or unet_motion");
  auto unet_text = ReadTextFile(unet_dir + "/config.json");
  if (!unet_text.ok()) return unet_text.status();
  auto unet_cfg = ParseUNetConfig(*unet_text, unet_dir + "/config.json");
  if (!unet_cfg.ok()) return unet_cfg.status();

  MotionConfig motion_cfg;
  std::string motion_format = "new";
  if (combined) {
    auto m = ParseMotionConfig(*unet_text, unet_dir + "/config.json");
    if (!m.ok()) return m.status();
    motion_cfg = *m;
    motion_format = "diffusers";
  } else if (!src.motion_adapter.empty()) {
    auto text = ReadTextFile(src.motion_adapter + "/config.json");
    if (!text.ok()) return text.status();
    auto m = ParseMotionConfig(*text, src.motion_adapter + "/config.json");
    if (!m.ok()) return m.status();
    motion_cfg = *m;
    motion_format = "diffusers";
  } else {
    // Fresh motion modules shaped like AnimateDiff's for this UNet.
    motion_cfg.layers_per_block = unet_cfg->layers_per_block;
    motion_cfg.norm_num_groups = unet_cfg->norm_num_groups;
  }
  ADCTL_RETURN_IF_ERROR(CheckMotionFitsUNet(*unet_cfg, motion_cfg));

  TensorMap motion_tensors, stored_tables;
  if (!src.motion_module_file.empty()) {
    auto raw = ReadMotionModuleFile(src.motion_module_file);
    if (!raw.ok()) return raw.status();
    stored_tables = StoredPositionTables(*raw);
    bool has_mid = false;
    for (const auto& [k, t] : *raw) {
      const auto mapped = AnimateDiffKeyToDiffusers(k);
      if (mapped.empty()) continue;
      has_mid = has_mid || mapped.rfind("mid_block.", 0) == 0;
      motion_tensors[mapped] = t;
    }
    if (motion_tensors.empty()) {
      std::vector<std::string> keys;
      for (const auto& [k, t] : *raw) keys.push_back(k);
      return InvalidArgument(src.motion_module_file +
                             ": no AnimateDiff motion-module tensors ('...motion_modules...') "
                             "found; its tensors are: " +
                             (keys.empty() ? std::string("none") : FirstFew(keys)));
    }
    motion_cfg.use_mid_block = has_mid;
    if (src.motion_adapter.empty()) {
      // No config beside the file: AnimateDiff's released modules use 8 heads and 32 norm
      // groups; the position-table length comes from the file when it kept one.
      motion_cfg.num_attention_heads = 8;
      motion_cfg.norm_num_groups = 32;
      for (const auto& [k, t] : *raw) {
        if (k.find("pos_encoder.pe") != std::string::npos && t.dim() == 3) {
          motion_cfg.max_seq_length = t.size(1);
          break;
        }
      }
      ADCTL_RETURN_IF_ERROR(CheckMotionFitsUNet(*unet_cfg, motion_cfg));
    }
    motion_format = "animatediff";
  }

  if (norm == MotionNorm::kAcrossFrames) {
    motion_cfg.norm_across_frames = true;
  } else if (norm == MotionNorm::kPerFrame) {
    motion_cfg.norm_across_frames = false;
  } else {
    // auto: the scope the module records (adctl's exports do), else its format's convention.
    std::string recorded = motion_cfg.recorded_norm;
    if (!src.motion_module_file.empty() && src.motion_module_file.size() > 12 &&
        src.motion_module_file.compare(src.motion_module_file.size() - 12, 12, ".safetensors") ==
            0) {
      auto r = RecordedMotionNorm(src.motion_module_file);
      if (!r.ok()) return r.status();
      recorded = *r;
    }
    motion_cfg.norm_across_frames =
        recorded.empty() ? motion_format != "animatediff" : recorded == "across_frames";
  }

  LoadedUNet out;
  {
    // The files overwrite every Linear and Conv2d (loading is strict), so they are allocated
    // without LibTorch's CPU initialisation; fresh motion modules are initialised below.
    DeferredInit deferred(torch::kCPU);
    out.model = UNet3D(*unet_cfg, motion_cfg);
  }
  out.motion_format = motion_format;
  auto weights_path = FindModelWeights(unet_dir);
  if (!weights_path.ok()) return weights_path.status();
  auto base = ReadTensorFile(*weights_path);
  if (!base.ok()) return base.status();

  if (combined) {
    const bool motion_from_file = !motion_tensors.empty();
    // The combined file holds both parts; an AnimateDiff file then replaces the motion part.
    TensorMap twod, motion;
    for (auto& [k, t] : *base) (IsMotionKey(k) ? motion : twod)[k] = t;
    ADCTL_RETURN_IF_ERROR(LoadStrict(
        *out.model, twod, [](const std::string& k) { return !IsMotionKey(k); }, *weights_path));
    ADCTL_RETURN_IF_ERROR(LoadStrict(*out.model, motion_from_file ? motion_tensors : motion,
                                     motion_from_file ? IsMotionWeight : IsMotionKey,
                                     motion_from_file ? src.motion_module_file : *weights_path));
    LoadStretchedPositionTables(*out.model, stored_tables);
    out.motion_loaded = true;
  } else {
    ADCTL_RETURN_IF_ERROR(LoadStrict(
        *out.model, *base, [](const std::string& k) { return !IsMotionKey(k); }, *weights_path));
    if (!motion_tensors.empty()) {
      ADCTL_RETURN_IF_ERROR(
          LoadStrict(*out.model, motion_tensors, IsMotionWeight, src.motion_module_file));
      LoadStretchedPositionTables(*out.model, stored_tables);
      out.motion_loaded = true;
    } else if (!src.motion_adapter.empty()) {
      ADCTL_RETURN_IF_ERROR(LoadMotionModules(*out.model, src.motion_adapter, ""));
      out.motion_loaded = true;
    } else {
      for (const auto& module : out.model->modules(/*include_self=*/false)) {
        if (auto* mm = module->as<MotionModuleImpl>()) InitializeLinearAndConv(*mm);
      }
      out.model->ZeroInitMotionProjOut();
    }
  }
  return out;
}

Status LoadMotionModules(UNet3DImpl& model, const std::string& adapter_dir,
                         const std::string& module_file) {
  if (!module_file.empty()) {
    auto raw = ReadMotionModuleFile(module_file);
    if (!raw.ok()) return raw.status();
    TensorMap mapped;
    for (const auto& [k, t] : *raw) {
      if (const auto name = AnimateDiffKeyToDiffusers(k); !name.empty()) mapped[name] = t;
    }
    ADCTL_RETURN_IF_ERROR(LoadStrict(model, mapped, IsMotionWeight, module_file));
    LoadStretchedPositionTables(model, StoredPositionTables(*raw));
    return Status::Ok();
  }
  auto adapter_path = FindModelWeights(adapter_dir);
  if (!adapter_path.ok()) return adapter_path.status();
  auto adapter = ReadTensorFile(*adapter_path);
  if (!adapter.ok()) return adapter.status();
  return LoadStrict(model, *adapter, IsMotionKey, *adapter_path);
}

namespace {

// The parameters and buffers of `model` that are (motion = true) or are not motion-module ones.
TensorMap Subset(UNet3DImpl& model, bool motion) {
  TensorMap tensors;
  for (const auto& item : model.named_parameters(true)) {
    if (IsMotionKey(item.key()) == motion) tensors[item.key()] = item.value();
  }
  for (const auto& item : model.named_buffers(true)) {
    if (IsMotionKey(item.key()) == motion) tensors[item.key()] = item.value();
  }
  return tensors;
}

}  // namespace

Status WriteModelFolder(const std::string& dir, const TensorMap& tensors,
                        const std::string& config) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal(dir + ": cannot create: " + ec.message());
  TensorMap fp32;
  for (const auto& [name, t] : tensors) fp32[name] = t.to(torch::kFloat);
  ADCTL_RETURN_IF_ERROR(WriteTensorFile(dir + "/diffusion_pytorch_model.safetensors", fp32));
  std::ofstream out(dir + "/config.json");
  out << config;
  out.close();
  if (!out) return Internal(dir + "/config.json: write failed");
  return Status::Ok();
}

TensorMap MotionAdapterTensors(UNet3DImpl& model) { return Subset(model, /*motion=*/true); }

std::string MotionAdapterConfig(UNet3DImpl& model) {
  return MotionAdapterConfigToJson(model.unet_config(), model.motion_config());
}

Status SaveMotionAdapter(UNet3DImpl& model, const std::string& dir) {
  return WriteModelFolder(dir, MotionAdapterTensors(model), MotionAdapterConfig(model));
}

Status SaveUNet2D(UNet3DImpl& model, const std::string& dir) {
  return WriteModelFolder(dir, Subset(model, /*motion=*/false),
                          UNetConfigToJson(model.unet_config()));
}

}  // namespace adctl

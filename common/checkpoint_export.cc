#include "common/checkpoint_export.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/fs_util.h"
#include "common/json_errors.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/strings.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kDiffusersPrefix[] = "unet.";
constexpr char kLoraA[] = ".lora_A.weight";
constexpr char kLoraB[] = ".lora_B.weight";

// diffusers projection suffix → AnimateDiff's processor attribute.
constexpr std::pair<const char*, const char*> kProjections[] = {{".to_q", "to_q_lora"},
                                                                {".to_k", "to_k_lora"},
                                                                {".to_v", "to_v_lora"},
                                                                {".to_out.0", "to_out_lora"}};

// IEEE half ↔ float, round to nearest even (what torch's .half() does).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
  } else {
    bits = sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);  // inf, nan
  if (abs >= 0x477ff000) return sign | 0x7c00;                                   // overflow
  if (abs < 0x38800000) {  // subnormal or zero: round at the half's fixed point
    const float magnitude = std::fabs(f) * 16777216.0f;  // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude));
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);
  return sign | static_cast<uint16_t>((rounded - 0x38000000) >> 13);
}

float BF16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

Result<std::vector<float>> ToFloats(const TensorInfo& t, const std::string& file) {
  const size_t n = t.nbytes / std::max<size_t>(DTypeSize(t.dtype), 1);
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), t.data, n * 4);
      return out;
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::kF16 ? HalfToFloat(v) : BF16ToFloat(v);
      }
      return out;
    default:
      return InvalidArgument(file + ": tensor '" + t.name + "' is " + DTypeName(t.dtype) +
                             ", not a floating-point weight");
  }
}

std::vector<uint8_t> FromFloats(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * DTypeSize(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t v = dtype == DType::kF16 ? FloatToHalf(values[i]) : FloatToBF16(values[i]);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

// A LoRA checkpoint file opened: its adapters by module, rank, alpha and metadata.
struct LoraFile {
  std::unique_ptr<SafetensorsFile> file;
  struct Pair {
    const TensorInfo* a = nullptr;
    const TensorInfo* b = nullptr;
  };
  std::map<std::string, Pair> modules;  // diffusers module path → tensors
  int64_t rank = 0;
  double alpha = 0;
  std::map<std::string, std::string> metadata;  // adctl's keys, carried into every export
};

Result<LoraFile> OpenLoraFile(const std::string& path) {
  LoraFile out;
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  out.file = std::move(*file);
  for (const TensorInfo& t : out.file->tensors()) {
    const bool a = EndsWith(t.name, kLoraA), b = EndsWith(t.name, kLoraB);
    if (t.name.rfind(kDiffusersPrefix, 0) != 0 || !(a || b) || t.shape.size() != 2 ||
        t.dtype != DType::kF32) {
      return InvalidArgument(path + ": tensor '" + t.name +
                             "' is not an fp32 2-D unet.<module>.lora_A/B.weight tensor");
    }
    const size_t prefix = std::strlen(kDiffusersPrefix);
    const std::string module =
        t.name.substr(prefix, t.name.size() - prefix - std::strlen(a ? kLoraA : kLoraB));
    (a ? out.modules[module].a : out.modules[module].b) = &t;
  }
  if (out.modules.empty()) return InvalidArgument(path + ": holds no LoRA tensors");
  for (const auto& [module, pair] : out.modules) {
    if (pair.a == nullptr || pair.b == nullptr) {
      return InvalidArgument(path + ": " + module + " has only one of its two LoRA tensors");
    }
    if (out.rank == 0) out.rank = pair.a->shape[0];
    if (pair.a->shape[0] != out.rank || pair.b->shape[1] != out.rank) {
      return InvalidArgument(path + ": " + module + " does not have rank " +
                             std::to_string(out.rank) + " like the others");
    }
  }
  for (const auto& [k, v] : out.file->metadata()) {
    if (k.rfind("adctl_", 0) == 0 || k == "motion_norm") out.metadata[k] = v;
  }
  out.alpha = static_cast<double>(out.rank);
  if (auto it = out.metadata.find(kLoraMetaAlpha); it != out.metadata.end()) {
    try {
      out.alpha = std::stod(it->second);
    } catch (const std::exception&) {
      return InvalidArgument(path + ": metadata " + kLoraMetaAlpha + " is not a number: '" +
                             it->second + "'");
    }
  }
  out.metadata[kLoraMetaRank] = std::to_string(out.rank);
  return out;
}

// B · scale as fp32 bytes.
std::vector<uint8_t> ScaledB(const TensorInfo& b, double scale) {
  std::vector<float> values(b.nbytes / 4);
  std::memcpy(values.data(), b.data, b.nbytes);
  for (float& v : values) v = static_cast<float>(v * scale);
  return FromFloats(values, DType::kF32);
}

// The base's motion-module tensors under diffusers' names, in their stored dtype.
struct BaseTensors {
  std::unique_ptr<SafetensorsFile> file;
  std::map<std::string, const TensorInfo*> by_name;
};

Result<BaseTensors> ReadBase(const std::string& base, const std::string& weights) {
  BaseTensors out;
  auto file = SafetensorsFile::Open(weights);
  if (!file.ok()) {
    return InvalidArgument("merged: the base motion module " + base +
                           " is not a safetensors file (" + file.status().message() + ")");
  }
  out.file = std::move(*file);
  const bool animatediff_layout = fs::is_regular_file(base);
  for (const TensorInfo& t : out.file->tensors()) {
    if (t.name.find("motion_modules.") == std::string::npos) continue;
    std::string name = animatediff_layout ? AnimateDiffKeyToDiffusers(t.name) : t.name;
    // The key map drops the positional tables (each attention block has a copy); diffusers
    // keeps the first once per transformer block.
    if (animatediff_layout && name.empty()) name = AnimateDiffTableKeyToDiffusers(t.name);
    if (!name.empty()) out.by_name[name] = &t;
  }
  if (out.by_name.empty()) return InvalidArgument(weights + ": holds no motion-module tensors");
  return out;
}

Result<ExportInfo> ExportLora(const std::string& lora_dir, ExportFormat format,
                              const std::string& out,
                              const std::map<std::string, std::string>& metadata) {
  const std::string path = lora_dir + "/" + kLoraFileName;
  auto lora = OpenLoraFile(path);
  if (!lora.ok()) return lora.status();
  const double scale = lora->alpha / static_cast<double>(lora->rank);
  std::map<std::string, std::string> meta = lora->metadata;
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta["format"] = "pt";
  ExportInfo info;
  info.motion_norm = meta.count("motion_norm") ? meta["motion_norm"] : "";

  std::error_code ec;
  const fs::path out_path(out);
  if (out_path.has_parent_path()) fs::create_directories(out_path.parent_path(), ec);
  if (ec) return Internal(out + ": cannot create its folder: " + ec.message());
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  (void)RemoveTree(tmp);
  // Byte buffers the tensors to write point into.
  std::vector<std::vector<uint8_t>> owned;
  owned.reserve(lora->modules.size() + 1);
  std::vector<TensorToWrite> tensors;
  const auto add = [&](std::string name, const TensorInfo& like, const void* data, size_t nbytes) {
    tensors.push_back({std::move(name), like.dtype, like.shape, data, nbytes});
    info.bytes += static_cast<int64_t>(nbytes);
  };
  const auto motion_only = [&](const std::string& module) -> Status {
    if (LoraModuleToAnimateDiff(module, true).empty()) {
      return FailedPrecondition(std::string(ExportFormatName(format)) +
                                " holds motion-module adapters only, and this LoRA adapts " +
                                module + " (model.lora.scope spatial/both): export diffusers-lora");
    }
    return Status::Ok();
  };

  if (format == ExportFormat::kDiffusersLora) {
    Json targets = Json::array();
    for (const auto& [module, pair] : lora->modules) {
      targets.push_back(module);
      add(kDiffusersPrefix + module + kLoraA, *pair.a, pair.a->data, pair.a->nbytes);
      owned.push_back(ScaledB(*pair.b, scale));
      add(kDiffusersPrefix + module + kLoraB, *pair.b, owned.back().data(), owned.back().size());
    }
    // alpha folded into B: diffusers computes the same model with or without the metadata.
    meta[kDiffusersLoraMetadataKey] = Json{
        {"unet.r", lora->rank},
        {"unet.lora_alpha", static_cast<double>(lora->rank)},
        {"unet.target_modules", targets}}.dump();
    fs::create_directories(tmp, ec);
    if (ec) return Internal(tmp + ": cannot create: " + ec.message());
    ADCTL_RETURN_IF_ERROR(WriteSafetensors(tmp + "/" + kLoraFileName, tensors, meta));
  } else if (format == ExportFormat::kAnimateDiffLora) {
    for (const auto& [module, pair] : lora->modules) {
      ADCTL_RETURN_IF_ERROR(motion_only(module));
      add(LoraModuleToAnimateDiff(module, true), *pair.a, pair.a->data, pair.a->nbytes);
      owned.push_back(ScaledB(*pair.b, scale));
      add(LoraModuleToAnimateDiff(module, false), *pair.b, owned.back().data(),
          owned.back().size());
    }
    ADCTL_RETURN_IF_ERROR(WriteSafetensors(tmp, tensors, meta));
  } else if (format == ExportFormat::kMerged) {
    const auto base_it = meta.find(kLoraMetaBase);
    if (base_it == meta.end() || base_it->second.empty()) {
      return FailedPrecondition(path + ": records no base motion module (" + kLoraMetaBase +
                                "), so it cannot be merged");
    }
    const std::string base = base_it->second;
    auto weights = BaseMotionWeightsFile(base);
    if (!weights.ok()) return FailedPrecondition("merged: " + weights.status().message());
    if (auto sha = meta.find(kLoraMetaBaseSha256); sha != meta.end()) {
      auto now = Sha256File(*weights);
      if (!now.ok()) return now.status();
      if (*now != sha->second) {
        return FailedPrecondition("merged: the base motion module " + *weights +
                                  " changed since the LoRA was trained on it (SHA-256 " + *now +
                                  ", trained on " + sha->second + ")");
      }
    }
    auto based = ReadBase(base, *weights);
    if (!based.ok()) return based.status();
    std::map<std::string, std::vector<uint8_t>> merged;
    for (const auto& [module, pair] : lora->modules) {
      ADCTL_RETURN_IF_ERROR(motion_only(module));
      const auto w_it = based->by_name.find(module + ".weight");
      if (w_it == based->by_name.end()) {
        return FailedPrecondition("merged: the base " + base + " has no " + module + ".weight");
      }
      const TensorInfo& w = *w_it->second;
      const int64_t rows = pair.b->shape[0], cols = pair.a->shape[1], r = lora->rank;
      if (w.shape != std::vector<int64_t>{rows, cols}) {
        return FailedPrecondition("merged: " + module + ".weight of the base " + base +
                                  " does not have the LoRA's shape [" + std::to_string(rows) +
                                  ", " + std::to_string(cols) + "]");
      }
      auto values = ToFloats(w, *weights);
      if (!values.ok()) return values.status();
      const float* a = reinterpret_cast<const float*>(pair.a->data);
      const float* b = reinterpret_cast<const float*>(pair.b->data);
      for (int64_t o = 0; o < rows; ++o) {
        float* row = values->data() + o * cols;
        for (int64_t k = 0; k < r; ++k) {
          const float coefficient = static_cast<float>(scale * b[o * r + k]);
          const float* a_row = a + k * cols;
          for (int64_t i = 0; i < cols; ++i) row[i] += coefficient * a_row[i];
        }
      }
      merged[w_it->first] = FromFloats(*values, w.dtype);
    }
    for (const auto& [name, t] : based->by_name) {
      auto m = merged.find(name);
      if (m == merged.end()) {
        add(name, *t, t->data, t->nbytes);
      } else {
        add(name, *t, m->second.data(), m->second.size());
      }
    }
    Json config;
    const std::string config_path = lora_dir + "/" + kLoraBaseConfigName;
    try {
      config = Json::parse(ReadFileText(config_path));
    } catch (const std::exception& e) {
      return InvalidArgument(config_path + ": " + JsonErrorWithoutContent(e));
    }
    if (info.motion_norm.empty()) info.motion_norm = config.value("motion_norm", "");
    if (!info.motion_norm.empty()) meta["motion_norm"] = info.motion_norm;
    const std::string adapter = tmp + "/" + ExportFileName(ExportFormat::kDiffusers);
    fs::create_directories(adapter, ec);
    if (ec) return Internal(adapter + ": cannot create: " + ec.message());
    ADCTL_RETURN_IF_ERROR(
        WriteSafetensors(adapter + "/diffusion_pytorch_model.safetensors", tensors, meta));
    ADCTL_RETURN_IF_ERROR(WriteFileText(adapter + "/config.json", config.dump(2) + "\n"));
    auto animatediff =
        ExportMotionModules(adapter, ExportFormat::kAnimateDiff,
                            tmp + "/" + ExportFileName(ExportFormat::kAnimateDiff), meta);
    if (!animatediff.ok()) return animatediff.status();
  } else {
    return InvalidArgument(std::string("export format ") + ExportFormatName(format) +
                           " is not a LoRA format");
  }
  info.tensors = static_cast<int64_t>(tensors.size());
  ADCTL_RETURN_IF_ERROR(MoveExportIntoPlace(tmp, out));
  info.path = out;
  return info;
}

}  // namespace

std::string LoraModuleToAnimateDiff(const std::string& module, bool down) {
  for (const auto& [suffix, processor] : kProjections) {
    if (!EndsWith(module, suffix)) continue;
    const std::string block = module.substr(0, module.size() - std::strlen(suffix));
    // The attention block's path through the motion-module key map, as a projection weight.
    const auto mapped = DiffusersKeyToAnimateDiff(block + ".to_q.weight");
    if (mapped.size() != 1 || !EndsWith(mapped[0], ".to_q.weight")) return "";
    return mapped[0].substr(0, mapped[0].size() - std::strlen(".to_q.weight")) + ".processor." +
           processor + (down ? ".down.weight" : ".up.weight");
  }
  return "";
}

bool AnimateDiffLoraKeyToModule(const std::string& key, std::string* module, bool* down) {
  for (const auto& [suffix, processor] : kProjections) {
    const std::string marker = std::string(".processor.") + processor + ".";
    const size_t at = key.find(marker);
    if (at == std::string::npos) continue;
    const std::string tail = key.substr(at + marker.size());
    if (tail != "down.weight" && tail != "up.weight") return false;
    const std::string mapped = AnimateDiffKeyToDiffusers(key.substr(0, at) + ".to_q.weight");
    if (mapped.empty() || !EndsWith(mapped, ".to_q.weight")) return false;
    *module = mapped.substr(0, mapped.size() - std::strlen(".to_q.weight")) + suffix;
    *down = tail == "down.weight";
    return true;
  }
  return false;
}

Result<std::string> BaseMotionWeightsFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_directory(path, ec)) return MotionAdapterWeights(path);
  return NotFound(path + ": no such base motion module (file or folder)");
}

std::string ExportFormatsFor(bool lora) {
  return lora ? "'diffusers-lora', 'animatediff-lora', 'merged'" : "'diffusers', 'animatediff'";
}

Result<ExportInfo> ExportCheckpoint(const std::string& checkpoint_dir, ExportFormat format,
                                    const std::string& out,
                                    const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  const bool lora = fs::is_directory(checkpoint_dir + "/" + kLoraCheckpointDir, ec);
  const bool full = fs::is_directory(checkpoint_dir + "/motion_adapter", ec);
  if (!lora && !full) {
    return FailedPrecondition(checkpoint_dir +
                              " holds neither motion modules (motion_adapter/) nor a LoRA (lora/)");
  }
  if (IsLoraExportFormat(format) != lora) {
    return FailedPrecondition(std::string("export format '") + ExportFormatName(format) +
                              "': " + checkpoint_dir +
                              (lora ? " holds a LoRA (lora/), which exports as "
                                    : " holds whole motion modules, which "
                                      "export as ") +
                              ExportFormatsFor(lora));
  }
  if (lora) return ExportLora(checkpoint_dir + "/" + kLoraCheckpointDir, format, out, metadata);
  return ExportMotionModules(checkpoint_dir + "/motion_adapter", format, out, metadata);
}

}  // namespace adctl

#include "common/motion_export.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/fs_util.h"
#include "common/json_errors.h"
#include "common/safetensors.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The renames inside a motion module, original → diffusers (AnimateDiff's
// animatediff/models/motion_module.py vs diffusers' models/unets/unet_motion_model.py).
constexpr std::pair<const char*, const char*> kBlockRenames[] = {
    {".attention_blocks.0.", ".attn1."},
    {".attention_blocks.1.", ".attn2."},
    {".norms.0.", ".norm1."},
    {".norms.1.", ".norm2."},
    {".ff_norm.", ".norm3."},
};
constexpr const char* kTemporal = "temporal_transformer.";
constexpr const char* kMotion = "motion_modules.";

bool ReplaceOnce(std::string& s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  if (pos == std::string::npos) return false;
  s.replace(pos, from.size(), to);
  return true;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The position just after "motion_modules.N." in `key`, or npos.
size_t AfterModuleIndex(const std::string& key) {
  const auto m = key.find(kMotion);
  if (m == std::string::npos) return std::string::npos;
  const auto dot = key.find('.', m + std::strlen(kMotion));
  return dot == std::string::npos ? std::string::npos : dot + 1;
}

}  // namespace

Result<std::string> MotionAdapterWeights(const std::string& dir) {
  for (const char* name :
       {"diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors"}) {
    if (fs::exists(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  }
  return NotFound(dir +
                  ": no diffusion_pytorch_model[.fp16].safetensors (not a MotionAdapter folder)");
}

Status MoveExportIntoPlace(const std::string& tmp, const std::string& out) {
  std::error_code ec;
  if (fs::is_directory(out) && fs::is_directory(tmp)) {
    auto removed = RemoveTree(out);
    if (!removed.ok()) return removed.status();
  }
  fs::rename(tmp, out, ec);
  if (ec) return Internal(out + ": cannot move the export into place: " + ec.message());
  return Status::Ok();
}

std::string AnimateDiffKeyToDiffusers(const std::string& key) {
  std::string k = key.rfind("module.", 0) == 0 ? key.substr(7) : key;
  if (k.find(kMotion) == std::string::npos || k.find("pos_encoder.pe") != std::string::npos) {
    return "";
  }
  ReplaceOnce(k, std::string(".") + kTemporal, ".");
  for (const auto& [from, to] : kBlockRenames) ReplaceOnce(k, from, to);
  return k;
}

std::string AnimateDiffTableKeyToDiffusers(const std::string& key) {
  const std::string first_table = ".attention_blocks.0.pos_encoder.pe";
  if (!EndsWith(key, first_table)) return "";
  std::string k = AnimateDiffKeyToDiffusers(key.substr(0, key.size() - first_table.size()) +
                                            ".attention_blocks.0.to_q.weight");
  const std::string query = ".attn1.to_q.weight";
  if (!EndsWith(k, query)) return "";
  return k.substr(0, k.size() - query.size()) + ".pos_embed.pe";
}

std::vector<std::string> DiffusersKeyToAnimateDiff(const std::string& key) {
  const auto at = AfterModuleIndex(key);
  if (at == std::string::npos) return {};
  std::string k = key;
  k.insert(at, kTemporal);
  if (EndsWith(k, ".pos_embed.pe")) {
    const std::string block = k.substr(0, k.size() - std::strlen("pos_embed.pe"));
    return {block + "attention_blocks.0.pos_encoder.pe",
            block + "attention_blocks.1.pos_encoder.pe"};
  }
  for (const auto& [from, to] : kBlockRenames) ReplaceOnce(k, to, from);
  return {k};
}

namespace {

constexpr std::pair<ExportFormat, const char*> kFormatNames[] = {
    {ExportFormat::kDiffusers, "diffusers"},
    {ExportFormat::kAnimateDiff, "animatediff"},
    {ExportFormat::kDiffusersLora, "diffusers-lora"},
    {ExportFormat::kAnimateDiffLora, "animatediff-lora"},
    {ExportFormat::kMerged, "merged"},
};

}  // namespace

Result<ExportFormat> ParseExportFormat(const std::string& name) {
  std::string names;
  for (const auto& [format, n] : kFormatNames) {
    if (name == n) return format;
    names += std::string(names.empty() ? "'" : ", '") + n + "'";
  }
  return InvalidArgument("export format: must be one of " + names + ", got '" + name + "'");
}

const char* ExportFormatName(ExportFormat format) {
  for (const auto& [f, n] : kFormatNames) {
    if (f == format) return n;
  }
  return "?";
}

bool IsLoraExportFormat(ExportFormat format) {
  return format == ExportFormat::kDiffusersLora || format == ExportFormat::kAnimateDiffLora ||
         format == ExportFormat::kMerged;
}

std::string ExportFileName(ExportFormat format) {
  switch (format) {
    case ExportFormat::kDiffusers:
      return "motion_adapter";
    case ExportFormat::kAnimateDiff:
      return "motion_module.safetensors";
    case ExportFormat::kDiffusersLora:
      return "lora_diffusers";  // a folder: load_lora_weights(dir) reads its one file
    case ExportFormat::kAnimateDiffLora:
      return "motion_lora.safetensors";
    case ExportFormat::kMerged:
      return "merged";  // motion_adapter/ and motion_module.safetensors
  }
  return "export";
}

Result<std::string> RecordedMotionNorm(const std::string& path) {
  if (EndsWith(path, ".json")) {
    Json j;
    try {
      j = Json::parse(ReadFileText(path));
      return j.value("motion_norm", std::string());
    } catch (const std::exception& e) {
      return InvalidArgument(path + ": " + JsonErrorWithoutContent(e));
    }
  }
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  auto it = (*file)->metadata().find("motion_norm");
  return it == (*file)->metadata().end() ? std::string() : it->second;
}

Result<ExportInfo> ExportMotionModules(const std::string& adapter_dir, ExportFormat format,
                                       const std::string& out,
                                       const std::map<std::string, std::string>& metadata) {
  if (IsLoraExportFormat(format)) {
    return InvalidArgument(std::string("export format ") + ExportFormatName(format) +
                           " is made from a LoRA, not from motion modules");
  }
  const std::string config_path = adapter_dir + "/config.json";
  if (!fs::exists(config_path)) {
    return NotFound(adapter_dir + ": no config.json (not a MotionAdapter folder)");
  }
  auto weights = MotionAdapterWeights(adapter_dir);
  if (!weights.ok()) return weights.status();
  auto norm = RecordedMotionNorm(config_path);
  if (!norm.ok()) return norm.status();
  ExportInfo info;
  info.motion_norm = norm->empty() ? "across_frames" : *norm;
  if (info.motion_norm != "per_frame" && info.motion_norm != "across_frames") {
    return InvalidArgument(config_path +
                           ": motion_norm must be 'per_frame' or 'across_frames', got '" +
                           info.motion_norm + "'");
  }
  auto file = SafetensorsFile::Open(*weights);
  if (!file.ok()) return file.status();
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  meta["motion_norm"] = info.motion_norm;

  std::vector<TensorToWrite> tensors;
  for (const auto& t : (*file)->tensors()) {
    const auto names = format == ExportFormat::kAnimateDiff ? DiffusersKeyToAnimateDiff(t.name)
                                                            : std::vector<std::string>{t.name};
    if (names.empty()) {
      return InvalidArgument(*weights + ": tensor '" + t.name +
                             "' is not a motion-module tensor (not a MotionAdapter file)");
    }
    for (const auto& name : names) {
      tensors.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
      info.bytes += static_cast<int64_t>(t.nbytes);
    }
  }
  info.tensors = static_cast<int64_t>(tensors.size());
  if (tensors.empty()) return InvalidArgument(*weights + ": holds no tensors");

  std::error_code ec;
  const fs::path out_path(out);
  if (out_path.has_parent_path()) fs::create_directories(out_path.parent_path(), ec);
  if (ec) return Internal(out + ": cannot create its folder: " + ec.message());
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  RemoveTree(tmp);
  if (format == ExportFormat::kAnimateDiff) {
    ADCTL_RETURN_IF_ERROR(WriteSafetensors(tmp, tensors, meta));
  } else {
    fs::create_directories(tmp, ec);
    if (ec) return Internal(tmp + ": cannot create: " + ec.message());
    ADCTL_RETURN_IF_ERROR(
        WriteSafetensors(tmp + "/diffusion_pytorch_model.safetensors", tensors, meta));
    Json config;
    try {
      config = Json::parse(ReadFileText(config_path));
    } catch (const std::exception& e) {
      return InvalidArgument(config_path + ": " + JsonErrorWithoutContent(e));
    }
    config["motion_norm"] = info.motion_norm;
    ADCTL_RETURN_IF_ERROR(WriteFileText(tmp + "/config.json", config.dump(2) + "\n"));
  }
  ADCTL_RETURN_IF_ERROR(MoveExportIntoPlace(tmp, out));
  info.path = out;
  return info;
}

}  // namespace adctl

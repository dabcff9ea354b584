#include "common/submit_check.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/fs_util.h"
#include "common/motion_export.h"
#include "common/safetensors.h"

namespace adctl {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kDefaultMaxSeqLength = 32;  // diffusers' MotionAdapter default

// motion_max_seq_length of a diffusers folder's config.json.
std::optional<int64_t> FolderLimit(const std::string& dir) {
  const std::string text = ReadFileText(dir + "/config.json");
  if (text.empty()) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(text);
    return j.value("motion_max_seq_length", kDefaultMaxSeqLength);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // the worker names a malformed config
  }
}

// The length of an AnimateDiff file's positional tables ([1, L, C]).
std::optional<int64_t> FileLimit(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return std::nullopt;
  for (const TensorInfo& t : (*file)->tensors()) {
    if (t.name.find("pos_encoder.pe") != std::string::npos && t.shape.size() == 3) {
      return t.shape[1];
    }
  }
  return std::nullopt;
}

bool IsLatentCache(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec);
}

}  // namespace

bool SpecNamesField(const std::string& yaml_text, const std::vector<std::string>& overrides,
                    const std::string& path) {
  for (const std::string& o : overrides) {
    if (o.rfind(path + "=", 0) == 0) return true;
  }
  try {
    YAML::Node node = YAML::Load(yaml_text);
    std::stringstream parts(path);
    std::string key;
    while (std::getline(parts, key, '.')) {
      if (!node.IsMap()) return false;
      node = node[key];
      if (!node.IsDefined()) return false;
    }
    return true;
  } catch (const YAML::Exception&) {
    return false;  // the parser has said what is wrong with it
  }
}

namespace {

// The length of the positional table the motion modules of `m` are loaded with.
std::optional<int64_t> TableLength(const ModelSpec& m) {
  if (!m.motion_module_file.empty()) {
    if (m.motion_module_file.size() > 12 &&
        m.motion_module_file.compare(m.motion_module_file.size() - 12, 12, ".safetensors") == 0) {
      return FileLimit(m.motion_module_file);
    }
    return std::nullopt;
  }
  if (!m.motion_adapter.empty()) return FolderLimit(m.motion_adapter);
  if (!m.unet_motion.empty()) return FolderLimit(m.unet_motion);
  if (m.preset != ModelPreset::kNone) return m.preset_layout == PresetLayout::kV1 ? 24 : 32;
  return kDefaultMaxSeqLength;  // new motion modules
}

}  // namespace

std::optional<int64_t> MotionFramesLimit(const ModelSpec& m) {
  const std::optional<int64_t> table = TableLength(m);
  // model.motion_max_frames interpolates a shorter table to its length.
  if (!table) return std::nullopt;
  return std::max(*table, m.motion_max_frames);
}

std::vector<int64_t> CacheFrames(const std::string& cache_dir) {
  const std::string text = ReadFileText(cache_dir + "/settings.json");
  if (text.empty()) return {};
  std::vector<int64_t> frames;
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.contains("buckets") && j["buckets"].is_array()) {
      for (const auto& b : j["buckets"]) {
        if (b.is_object() && b.contains("frames") && b["frames"].is_number_integer()) {
          frames.push_back(b["frames"].get<int64_t>());
        }
      }
    } else if (j.contains("frames") && j["frames"].is_number_integer()) {
      frames.push_back(j["frames"].get<int64_t>());
    }
  } catch (const nlohmann::json::exception&) {
    // the worker names a malformed cache
  }
  return frames;
}

Status CheckSubmitInputs(const JobSpec& spec, const SubmitInputs& inputs) {
  const bool preprocess = spec.kind == JobKind::kPreprocess;
  if (const auto limit = MotionFramesLimit(spec.model); limit && !preprocess) {
    const std::string holds = ", the motion modules hold at most " + std::to_string(*limit) +
                              " (their positional table; model.motion_max_frames extends it)";
    if (spec.data.kind != DataKind::kLatents && spec.data.frames > *limit) {
      return InvalidArgument("data.frames: " + std::to_string(spec.data.frames) + holds);
    }
    if (!spec.validation.prompts.empty() && spec.validation.frames > *limit) {
      return InvalidArgument("validation.frames: " + std::to_string(spec.validation.frames) +
                             holds);
    }
  }
  const auto check_cache = [&](const char* field, const std::string& dir) -> Status {
    if (IsLatentCache(dir) || inputs.caches_being_written.count(dir)) return Status::Ok();
    return InvalidArgument(std::string(field) + ": " + dir +
                           " does not exist (a latent cache: a preprocess job's "
                           "preprocess.output), and no queued or running preprocess job writes it");
  };
  if (spec.data.kind == DataKind::kLatents && !preprocess) {
    // data.path, or each of data.sources: it exists, and its frames agree with data.frames (when
    // set) and the motion modules. Sources of other frames or pixel sizes are shape buckets of
    // one run (the worker checks that they agree on latent channels and text states).
    std::vector<std::pair<std::string, std::string>> caches;  // (field, path)
    if (spec.data.sources.empty()) {
      caches.emplace_back("data.path", spec.data.path);
    } else {
      for (size_t i = 0; i < spec.data.sources.size(); ++i) {
        caches.emplace_back("data.sources[" + std::to_string(i) + "].path",
                            spec.data.sources[i].path);
      }
    }
    for (const auto& [field, path] : caches) {
      ADCTL_RETURN_IF_ERROR(check_cache(field.c_str(), path));
      for (const int64_t frames : CacheFrames(path)) {
        if (inputs.data_frames_set && frames != spec.data.frames) {
          return InvalidArgument("data.frames: " + std::to_string(spec.data.frames) +
                                 ", and the cache in " + path + " was made with " +
                                 std::to_string(frames) +
                                 " frames a clip (remove data.frames to train on the cache's)");
        }
        if (const auto limit = MotionFramesLimit(spec.model); limit && frames > *limit) {
          return InvalidArgument(
              field + ": the cache in " + path + " holds clips of " + std::to_string(frames) +
              " frames; the motion modules hold at most " + std::to_string(*limit));
        }
      }
    }
  }
  if (!spec.eval.path.empty()) ADCTL_RETURN_IF_ERROR(check_cache("eval.path", spec.eval.path));
  return Status::Ok();
}

}  // namespace adctl

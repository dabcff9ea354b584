#include "common/lora_check.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint_export.h"
#include "common/motion_export.h"
#include "common/safetensors.h"
#include "common/strings.h"

namespace adctl {
namespace fs = std::filesystem;

namespace {

// The narrowest projection of each target in one weights file: its name and min(in, out).
struct Narrowest {
  std::string name;
  int64_t width = 0;
};

// Projections `<…>.<target>.weight` (2-D) of `file` whose name is in the motion modules
// (`motion`) or not, by target.
std::map<std::string, Narrowest> ProjectionWidths(const SafetensorsFile& file,
                                                  const std::vector<std::string>& targets,
                                                  bool motion) {
  std::map<std::string, Narrowest> out;
  for (const TensorInfo& t : file.tensors()) {
    if (t.shape.size() != 2) continue;
    if ((t.name.find("motion_modules.") != std::string::npos) != motion) continue;
    // Attention projections only: a spatial ResNet or proj_in has no to_q.
    for (const std::string& target : targets) {
      if (!EndsWith(t.name, "." + target + ".weight")) continue;
      const int64_t width = std::min(t.shape[0], t.shape[1]);
      auto [it, fresh] = out.try_emplace(target, Narrowest{t.name, width});
      if (!fresh && width < it->second.width) it->second = {t.name, width};
    }
  }
  return out;
}

Status CheckScope(const ModelSpec& m, const std::string& weights, bool motion,
                  const std::vector<std::string>& targets) {
  auto file = SafetensorsFile::Open(weights);
  if (!file.ok()) return file.status();
  const auto widths = ProjectionWidths(**file, targets, motion);
  const char* where = motion ? "the motion modules of " : "the spatial transformers of ";
  for (const std::string& target : targets) {
    auto it = widths.find(target);
    if (it == widths.end()) {
      return InvalidArgument("model.lora.targets: '" + target + "' matches no projection in " +
                             where + weights);
    }
    if (m.lora.rank > it->second.width) {
      return InvalidArgument("model.lora.rank: " + std::to_string(m.lora.rank) +
                             " is above the width of " + it->second.name + " (" +
                             std::to_string(it->second.width) + ") in " + weights);
    }
  }
  return Status::Ok();
}

// The rank of a LoRA file in either layout: the first dimension of its A (down) tensors.
Status CheckInitFrom(const ModelSpec& m) {
  const std::string& path = m.lora.init_from;
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return Status::Ok();
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return InvalidArgument("model.lora.init_from: " + file.status().message());
  for (const TensorInfo& t : (*file)->tensors()) {
    std::string module;
    bool down = false;
    const bool a = EndsWith(t.name, ".lora_A.weight") ||
                   (AnimateDiffLoraKeyToModule(t.name, &module, &down) && down);
    if (!a || t.shape.size() != 2) continue;
    if (t.shape[0] != m.lora.rank) {
      return InvalidArgument("model.lora.init_from: " + path + " holds a rank-" +
                             std::to_string(t.shape[0]) + " LoRA (" + t.name +
                             "), and model.lora.rank is " + std::to_string(m.lora.rank));
    }
    return Status::Ok();
  }
  return InvalidArgument("model.lora.init_from: " + path +
                         " holds no LoRA tensor (unet.<module>.lora_A.weight or "
                         "….processor.to_q_lora.down.weight)");
}

}  // namespace

std::string UnetWeightsFile(const ModelSpec& m) {
  std::vector<std::string> dirs;
  if (!m.unet_motion.empty()) dirs.push_back(m.unet_motion);
  if (!m.unet2d.empty()) dirs.push_back(m.unet2d);
  if (!m.pretrained.empty()) dirs.push_back((fs::path(m.pretrained) / "unet").string());
  for (const std::string& dir : dirs) {
    auto weights = MotionAdapterWeights(dir);  // the same diffusion_pytorch_model file names
    if (weights.ok()) return *weights;
  }
  return "";
}

Status CheckLoraFitsModel(const ModelSpec& m) {
  if (!m.lora.enabled()) return Status::Ok();
  const std::vector<std::string>& targets =
      m.lora.targets.empty() ? DefaultLoraTargets() : m.lora.targets;
  if (m.lora.scope != LoraScope::kSpatial) {
    auto base = BaseMotionWeightsFile(LoraBaseMotionModule(m));
    if (base.ok()) ADCTL_RETURN_IF_ERROR(CheckScope(m, *base, /*motion=*/true, targets));
  }
  if (m.lora.scope != LoraScope::kMotion) {
    const std::string spatial = UnetWeightsFile(m);
    if (!spatial.empty()) ADCTL_RETURN_IF_ERROR(CheckScope(m, spatial, /*motion=*/false, targets));
  }
  return CheckInitFrom(m);
}

}  // namespace adctl

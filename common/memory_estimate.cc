#include "common/memory_estimate.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/checkpoint_export.h"
#include "common/lora_check.h"
#include "common/safetensors.h"
#include "common/strings.h"

namespace adctl {
namespace fs = std::filesystem;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// ---- Calibration -----------------------------------------------------------------------------
// CUDA caching-allocator peaks (max over steps) of bench/engine-bench at the reference shape:
// SD1.5 UNet (859,520,964 parameters) + v2 motion modules (453,209,280), 16 frames of 32 × 32
// latents, 77 × 768 text states, bf16 compute, fused kernels, one GPU. Identical on the H100 and
// the H200 (bench/results/channelslast_h200_20261204.md, lora_h100_20261205.md,
// ema_sidestream_mix3_h100_20261206.md):
//   full modules:  b1 14.0 GiB, b8 46.2 GiB, b8 + resnets checkpointing 45.4 GiB,
//                  b8 + full checkpointing 14.8 GiB, b8 + EMA 47.9 GiB
//   MotionLoRA (rank 64 = alpha, default targets): b1 7.3 GiB, b8 36.1 GiB
// The slope b1 → b8 is the activations one clip keeps; what b1 holds beyond them is the weights
// and optimizer state (counted from parameters below) plus a workspace.
constexpr double kRefPositions = 16.0 * 32 * 32;  // frames × latent height × width
// Activations per clip at the reference shape, GiB, by model.gradient_checkpointing.
constexpr double kActivationNone = (46.2 - 14.0) / 7;    // 4.60
constexpr double kActivationResnets = (45.4 - 9.4) / 8;  // 4.50 (9.4: b1 minus one clip)
constexpr double kActivationFull = (14.8 - 9.4) / 8;     // 0.675
// A MotionLoRA keeps less: the frozen projections need no input saved for their weight
// gradient. (36.1 - 7.3) / 7 against the full modules' 4.60.
constexpr double kLoraActivationRatio = ((36.1 - 7.3) / 7) / kActivationNone;  // 0.894
// Full modules: 9.4 GiB at b1 minus 9.20 GiB of counted state; LoRA: 3.19 minus 2.76.
constexpr double kWorkspaceGiB = 0.3;
// SD1.5's activation width: Σ over the UNet's levels of channels / 4^level (320, 640, 1280,
// 1280 at 1, 1/4, 1/16, 1/64 of the positions).
constexpr double kRefWidth = 320.0 + 640.0 / 4 + 1280.0 / 16 + 1280.0 / 64;

constexpr int64_t kSd15UnetParams = 859520964;
constexpr int64_t kSd15MotionV2Params = 453209280;
constexpr int64_t kSd15MotionV1Params = 417137600;  // v1 and v3: no mid-block module

int64_t Elements(const TensorInfo& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

bool IsMotion(const std::string& name) { return name.find("motion_modules.") != std::string::npos; }

// block_out_channels of the UNet's config.json (beside its weights); SD1.5's otherwise.
std::vector<int64_t> BlockChannels(const ModelSpec& m) {
  if (m.preset == ModelPreset::kTiny) return {32, 64};
  const std::string weights = UnetWeightsFile(m);
  std::ifstream in(fs::path(weights).parent_path() / "config.json");
  if (!weights.empty() && in) {
    auto config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    std::vector<int64_t> channels;
    if (config.is_object() && config.contains("block_out_channels")) {
      for (const auto& c : config["block_out_channels"]) {
        if (c.is_number_integer()) channels.push_back(c.get<int64_t>());
      }
    }
    if (!channels.empty()) return channels;
  }
  return {320, 640, 1280, 1280};
}

// Motion modules of a UNet with these channels: 2 per down level, 3 per up level, one in the
// mid block (v2), each 22C² + 21C parameters (docs: animatediff-spec "params per module").
int64_t MotionParamsFromChannels(const std::vector<int64_t>& channels, bool mid) {
  int64_t n = 0;
  auto module = [](int64_t c) { return 22 * c * c + 21 * c; };
  for (int64_t c : channels) n += 5 * module(c);
  if (mid) n += module(channels.back());
  return n;
}

struct Counts {
  int64_t unet = 0;    // image UNet
  int64_t motion = 0;  // motion modules
  int64_t lora = 0;    // adapters
  std::string basis;
};

// Adapter parameters rank × (in + out) of every targeted 2-D projection in `file`, motion or
// spatial.
int64_t LoraParams(const SafetensorsFile& file, const LoraSpec& lora, bool motion) {
  const std::vector<std::string>& targets =
      lora.targets.empty() ? DefaultLoraTargets() : lora.targets;
  int64_t n = 0;
  for (const TensorInfo& t : file.tensors()) {
    if (t.shape.size() != 2 || IsMotion(t.name) != motion) continue;
    for (const std::string& target : targets) {
      if (EndsWith(t.name, "." + target + ".weight")) n += lora.rank * (t.shape[0] + t.shape[1]);
    }
  }
  return n;
}

// Adapters on the default targets without a file to read: two attention blocks of four C × C
// projections in every motion module (spatial: one self- and one cross-attention a transformer,
// counted alike).
int64_t LoraParamsFromChannels(const std::vector<int64_t>& channels, const LoraSpec& lora,
                               bool mid) {
  const int64_t targets = static_cast<int64_t>(lora.targets.empty() ? DefaultLoraTargets().size()
                                                                    : lora.targets.size());
  int64_t sum_c = 0;
  for (int64_t c : channels) sum_c += 5 * c;
  if (mid) sum_c += channels.back();
  return 2 * targets * lora.rank * 2 * sum_c;
}

Counts CountParams(const ModelSpec& m, const std::vector<int64_t>& channels) {
  Counts c;
  std::vector<std::string> read;
  const bool scope_motion = m.lora.scope != LoraScope::kSpatial;
  const bool scope_spatial = m.lora.scope != LoraScope::kMotion;
  // The image UNet (and, in a combined unet_motion folder, its motion modules).
  const std::string unet_weights = UnetWeightsFile(m);
  Result<std::unique_ptr<SafetensorsFile>> unet = NotFound("no UNet weights named");
  if (!unet_weights.empty()) unet = SafetensorsFile::Open(unet_weights);
  if (unet.ok()) {
    for (const TensorInfo& t : (*unet)->tensors()) {
      if (EndsWith(t.name, ".pe")) continue;  // positional-encoding buffers, not parameters
      (IsMotion(t.name) ? c.motion : c.unet) += Elements(t);
    }
    if (m.lora.enabled() && scope_spatial) c.lora += LoraParams(**unet, m.lora, false);
    read.push_back(unet_weights);
  }
  // A motion module file or adapter replaces the combined folder's modules.
  const std::string motion_path = LoraBaseMotionModule(m);
  bool motion_read = false;
  if (!motion_path.empty() && motion_path != m.unet_motion) {
    auto weights = BaseMotionWeightsFile(motion_path);
    Result<std::unique_ptr<SafetensorsFile>> file = weights.status();
    if (weights.ok()) file = SafetensorsFile::Open(*weights);
    if (file.ok()) {
      c.motion = 0;
      for (const TensorInfo& t : (*file)->tensors()) {
        if (EndsWith(t.name, ".pe")) continue;  // positional-encoding buffers, not parameters
        c.motion += Elements(t);
      }
      // An AnimateDiff file names its tensors down_blocks.…motion_modules.…; a diffusers
      // MotionAdapter's are under the same motion_modules. prefix.
      if (m.lora.enabled() && scope_motion) c.lora += LoraParams(**file, m.lora, true);
      motion_read = true;
      read.push_back(*weights);
    }
  } else if (unet.ok() && c.motion > 0) {
    motion_read = true;
    if (m.lora.enabled() && scope_motion) c.lora += LoraParams(**unet, m.lora, true);
  }
  const bool mid = m.preset == ModelPreset::kNone || m.preset_layout == PresetLayout::kV2;
  if (m.preset == ModelPreset::kSd15) {
    c.unet = kSd15UnetParams;
    if (!motion_read) c.motion = mid ? kSd15MotionV2Params : kSd15MotionV1Params;
  } else if (m.preset == ModelPreset::kTiny || c.unet == 0) {
    // No file to count: the image UNet scaled from SD1.5's by Σ channels².
    double sq = 0, sd15 = 320.0 * 320 + 640.0 * 640 + 2 * 1280.0 * 1280;
    for (int64_t ch : channels) sq += static_cast<double>(ch) * ch;
    c.unet = static_cast<int64_t>(kSd15UnetParams * sq / sd15);
  }
  if (!motion_read && m.preset != ModelPreset::kSd15) {
    c.motion = MotionParamsFromChannels(channels, mid);
  }
  if (m.lora.enabled() && c.lora == 0) {
    c.lora = LoraParamsFromChannels(channels, m.lora, mid) *
             ((scope_motion ? 1 : 0) + (scope_spatial ? 1 : 0));
  }
  if (!read.empty()) {
    c.basis = m.preset == ModelPreset::kSd15 ? "preset sd15's image UNet; safetensors headers of "
                                             : "safetensors headers of ";
    for (size_t i = 0; i < read.size(); ++i) c.basis += (i ? ", " : "") + read[i];
  } else if (m.preset == ModelPreset::kSd15) {
    c.basis = "preset sd15 (" + Name(m.preset_layout) + ")";
  } else {
    c.basis = "model shape (block_out_channels), parameter counts approximate";
  }
  return c;
}

// The clip the rank trains on: frames × latent height × width. A latent cache's first shard
// gives its shape; the spec's data fields otherwise.
double LatentPositions(const DataSpec& d) {
  double positions = static_cast<double>(d.frames) * d.height * d.width;
  if (d.kind != DataKind::kLatents) return positions;
  const std::string dir = !d.sources.empty() ? d.sources.front().path : d.path;
  std::error_code ec;
  std::vector<fs::path> shards;
  for (fs::directory_iterator it(fs::path(dir) / "shards", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().extension() == ".safetensors") shards.push_back(it->path());
  }
  std::sort(shards.begin(), shards.end());
  for (const fs::path& shard : shards) {
    auto file = SafetensorsFile::Open(shard.string());
    if (!file.ok()) continue;
    const TensorInfo* t = (*file)->Find("latent_mean");
    if (t == nullptr || t->shape.size() != 5) continue;  // [n, C, F, h, w]
    return static_cast<double>(t->shape[2]) * t->shape[3] * t->shape[4];
  }
  return positions;
}

}  // namespace

Result<MemoryEstimate> EstimateTrainingMemory(const JobSpec& spec) {
  if (spec.kind == JobKind::kPreprocess) {
    return FailedPrecondition("no memory estimate for a preprocess job");
  }
  const ModelSpec& m = spec.model;
  const std::vector<int64_t> channels = BlockChannels(m);
  const Counts counts = CountParams(m, channels);
  const bool bf16 = ResolvePrecision(spec.train.precision, /*on_gpu=*/true) == Precision::kBf16;
  const int64_t frozen_bytes_per_param = bf16 ? 2 : 4;

  MemoryEstimate e;
  e.basis = counts.basis;
  // Trained parameters in fp32 with their gradient and AdamW's two moments (16 bytes), and in
  // bf16 the copy the forward casts and keeps for the backward (2 more).
  const int64_t trained_bytes_per_param = 16 + (bf16 ? 2 : 0);
  const TrainSpec& t = spec.train;
  const bool ema_on_gpu = t.ema.enabled() && t.ema.device == EmaDevice::kGpu;
  if (m.lora.enabled()) {
    e.frozen_params = counts.unet + counts.motion;
    e.trainable_params = counts.lora;
  } else {
    e.frozen_params = counts.unet;
    e.trainable_params = counts.motion;
  }
  e.weights_bytes = e.frozen_params * frozen_bytes_per_param;
  e.trainable_bytes = e.trainable_params * (trained_bytes_per_param + (ema_on_gpu ? 4 : 0));

  double per_clip = kActivationNone;
  if (m.gradient_checkpointing == GradientCheckpointing::kResnets) per_clip = kActivationResnets;
  if (m.gradient_checkpointing == GradientCheckpointing::kFull) per_clip = kActivationFull;
  // Full checkpointing keeps only each segment's input, the same for a LoRA; the ratio applies
  // to what is kept without it (bench/results/memory_estimate_h100_20261206.md: b8 LoRA with
  // full checkpointing measured 9.1 GiB).
  if (m.lora.enabled() && m.gradient_checkpointing != GradientCheckpointing::kFull) {
    per_clip *= kLoraActivationRatio;
  }
  double width = 0;
  for (size_t level = 0; level < channels.size(); ++level) {
    width += static_cast<double>(channels[level]) / static_cast<double>(int64_t{1} << (2 * level));
  }
  per_clip *= (LatentPositions(spec.data) / kRefPositions) * (width / kRefWidth);
  if (!bf16) per_clip *= 2;  // fp32 activations
  e.activation_bytes = static_cast<int64_t>(per_clip * static_cast<double>(t.batch_size) * kGiB);

  double workspace = kWorkspaceGiB * kGiB;
  // Data-parallel ranks add the gradient buckets being reduced (two in flight).
  if (spec.resources.gpus > 1) workspace += 2 * t.bucket_cap_mb * 1024 * 1024;
  e.workspace_bytes = static_cast<int64_t>(workspace);
  return e;
}

}  // namespace adctl

// What a checkpoint exports to, by what it holds, Torch-free (adctld's `adctl export`; adworker
// at the end of a job):
//
//   motion_adapter/   a full-module job's motion modules → diffusers, animatediff
//                     (common/motion_export.h);
//   lora/             a LoRA job's adapters (kLoraFileName: diffusers' PEFT names, fp32, alpha
//                     not folded; the metadata below) and the base motion module's MotionAdapter
//                     config (kLoraBaseConfigName) →
//     diffusers-lora    `lora_diffusers/pytorch_lora_weights.safetensors`, what
//                       `AnimateDiffPipeline.load_lora_weights(dir)` and
//                       `UNetMotionModel.load_lora_adapter` load: `unet.<module>.lora_A/B.weight`,
//                       alpha/rank folded into B and `lora_adapter_metadata` saying alpha = rank,
//                       so loaders that read the metadata and loaders that do not agree;
//     animatediff-lora  AnimateDiff's MotionLoRA layout (`….attention_blocks.J.processor.
//                       to_q_lora.down.weight` / `up`), up = B · alpha/rank, as AnimateDiff's
//                       loader adds `alpha · up · down` with alpha 1 (motion adapters only);
//     merged            the base motion module with W += alpha/rank · B A, in both layouts
//                       (`merged/motion_adapter/`, `merged/motion_module.safetensors`), read from
//                       the base the checkpoint names and checked against its SHA-256.
//
// Every LoRA file records rank, alpha, targets, the base motion module and its SHA-256 and
// the step (kLoraMeta* keys). Functions are thread-compatible.
#pragma once

#include <map>
#include <string>

#include "common/motion_export.h"
#include "common/status.h"

namespace adctl {

inline constexpr char kLoraCheckpointDir[] = "lora";
inline constexpr char kLoraFileName[] = "pytorch_lora_weights.safetensors";
inline constexpr char kLoraBaseConfigName[] = "motion_adapter_config.json";
// train.ema's average (worker/train/ema.h): a checkpoint's ema/ folder holds it in the
// checkpoint's own layout (ema/motion_adapter/ or ema/lora/), so it exports the same way; the
// manifest's metadata counts its updates.
inline constexpr char kEmaCheckpointDir[] = "ema";
inline constexpr char kEmaUpdatesKey[] = "ema_updates";

// The safetensors metadata of adctl's LoRA files (besides diffusers' `lora_adapter_metadata`).
inline constexpr char kLoraMetaRank[] = "adctl_lora_rank";
inline constexpr char kLoraMetaAlpha[] = "adctl_lora_alpha";
inline constexpr char kLoraMetaTargets[] = "adctl_lora_targets";     // "to_q,to_k,to_v,to_out.0"
inline constexpr char kLoraMetaScope[] = "adctl_lora_scope";         // motion, spatial, both
inline constexpr char kLoraMetaBase[] = "adctl_base_motion_module";  // the path trained on
inline constexpr char kLoraMetaBaseSha256[] = "adctl_base_sha256";   // of its weights file
inline constexpr char kDiffusersLoraMetadataKey[] = "lora_adapter_metadata";

// A diffusers module path (`down_blocks.0.motion_modules.0.transformer_blocks.0.attn1.to_q`) as
// AnimateDiff's MotionLoRA key of its down (A) or up (B) tensor; "" when the module is no
// motion-module attention projection.
std::string LoraModuleToAnimateDiff(const std::string& module, bool down);
// The inverse: an AnimateDiff MotionLoRA key as the diffusers module path and whether it is the
// down (A) tensor; false when `key` is not one.
bool AnimateDiffLoraKeyToModule(const std::string& key, std::string* module, bool* down);

// The weights file whose SHA-256 identifies a base motion module: `path` itself when it is a
// file, else the weights file of its MotionAdapter or UNetMotionModel folder.
Result<std::string> BaseMotionWeightsFile(const std::string& path);

// Exports checkpoint folder `checkpoint_dir` (motion_adapter/ or lora/) as `format` to `out`
// (ExportFileName(format) inside an export folder), atomically. A format the checkpoint cannot
// hold is FailedPrecondition naming the formats it can.
Result<ExportInfo> ExportCheckpoint(const std::string& checkpoint_dir, ExportFormat format,
                                    const std::string& out,
                                    const std::map<std::string, std::string>& metadata = {});

// Formats that a checkpoint folder holding a LoRA (or not) can be exported as, for messages:
// "'diffusers-lora', 'animatediff-lora', 'merged'".
std::string ExportFormatsFor(bool lora);

}  // namespace adctl

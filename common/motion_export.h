// Motion modules in the two layouts the inference tools load, Torch-free (adctld exports on
// demand; adworker at the end of a job):
//
//   diffusers    a `MotionAdapter` folder (config.json + diffusion_pytorch_model.safetensors),
//                what `MotionAdapter.from_pretrained` and AnimateDiffPipeline take;
//   animatediff  one .safetensors file with the original AnimateDiff key names
//                (`...motion_modules.N.temporal_transformer.transformer_blocks.0.
//                attention_blocks.{0,1}...`, `pos_encoder.pe` in each attention block), what
//                ComfyUI-AnimateDiff-Evolved and the A1111 extension load (mm_sd_v15_v2 form).
//
// Both record the motion-module GroupNorm scope: `motion_norm` ("per_frame" or
// "across_frames") in config.json and in the safetensors metadata. The key map between the two
// layouts lives here and only here. Functions are thread-compatible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

// Original AnimateDiff motion-module key → diffusers key; "" for keys that are dropped
// (non-motion keys and `pos_encoder.pe`, which diffusers keeps once per transformer block).
// Strips a DDP "module." prefix.
std::string AnimateDiffKeyToDiffusers(const std::string& key);
// An AnimateDiff positional table's key (`...transformer_blocks.0.attention_blocks.0.
// pos_encoder.pe`) → the diffusers key of its block's one table (`...transformer_blocks.0.
// pos_embed.pe`); "" for the second attention block's copy and for every other key.
std::string AnimateDiffTableKeyToDiffusers(const std::string& key);
// diffusers MotionAdapter key → original AnimateDiff keys: one, or two for a block's
// `pos_embed.pe` (each attention block has its own table there); none for non-motion keys.
std::vector<std::string> DiffusersKeyToAnimateDiff(const std::string& key);

// The formats of a full-module checkpoint (diffusers, animatediff) and of a LoRA job's
// (diffusers-lora, animatediff-lora, merged: common/checkpoint_export.h).
enum class ExportFormat { kDiffusers, kAnimateDiff, kDiffusersLora, kAnimateDiffLora, kMerged };
// "diffusers", "animatediff", "diffusers-lora", "animatediff-lora", "merged"; an unknown name
// is InvalidArgument listing them.
Result<ExportFormat> ParseExportFormat(const std::string& name);
const char* ExportFormatName(ExportFormat format);
// Whether `format` is made from a LoRA job's checkpoint (the last three).
bool IsLoraExportFormat(ExportFormat format);
// The file or folder name an export of `format` gets inside an export directory.
std::string ExportFileName(ExportFormat format);

struct ExportInfo {
  std::string path;         // what was written
  std::string motion_norm;  // the scope recorded
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// Exports the MotionAdapter folder `adapter_dir` (a checkpoint's motion_adapter/) to `out`
// (a folder for diffusers, a .safetensors file for animatediff), atomically (temporary name,
// fsync, rename). The scope is read from the adapter's config.json (`motion_norm`); adapters
// that do not record one were trained by diffusers' convention (across frames).
// `metadata` is added to the safetensors metadata (e.g. the step and job id).
Result<ExportInfo> ExportMotionModules(const std::string& adapter_dir, ExportFormat format,
                                       const std::string& out,
                                       const std::map<std::string, std::string>& metadata = {});

// The `motion_norm` a MotionAdapter config.json or a safetensors file records ("" when none).
Result<std::string> RecordedMotionNorm(const std::string& path);

// The weights file of MotionAdapter folder `dir`: diffusion_pytorch_model[.fp16].safetensors.
Result<std::string> MotionAdapterWeights(const std::string& dir);
// Moves the finished export `tmp` (a file or a folder) to `out`, replacing what is there.
Status MoveExportIntoPlace(const std::string& tmp, const std::string& out);

}  // namespace adctl

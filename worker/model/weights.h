// Loading and saving UNet3D weights in diffusers' on-disk formats, strictly.
//
// Sources: a UNet2DConditionModel directory plus a MotionAdapter directory (the usual path:
// SD1.5 + an adapter), a combined UNetMotionModel directory, or an original AnimateDiff
// motion-module file (safetensors) whose keys are renamed by the one key map below
// (AnimateDiff's mm_sd_v15_v2 key names → diffusers MotionAdapter). Loading is a strict walk over
// the model's own parameter and buffer names: a missing, unexpected or mis-shaped tensor is an
// error naming the key. Output: a MotionAdapter directory diffusers loads with
// `MotionAdapter.from_pretrained`.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "common/job_spec.h"
#include "common/motion_export.h"
#include "common/status.h"
#include "worker/model/unet3d.h"

namespace adctl {

using TensorMap = std::map<std::string, torch::Tensor>;

// Reads every tensor of a safetensors file into CPU tensors (copied out of the mapping).
Result<TensorMap> ReadTensorFile(const std::string& path);
// Writes CPU copies of `tensors` (any device, contiguous or not) to a safetensors file.
Status WriteTensorFile(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// The weights file of a diffusers/transformers model folder: `diffusion_pytorch_model` or
// `model` `.safetensors`, else their `.fp16.safetensors` variants. The error lists what is there.
Result<std::string> FindModelWeights(const std::string& dir);

// An original AnimateDiff motion-module file as users download it: safetensors, or a
// `torch.save` .ckpt (zip format, PyTorch >= 1.6) holding a {name: tensor} dict, bare or under
// "state_dict". Keys are returned as stored (map them with AnimateDiffKeyToDiffusers). A file
// that is neither is an error naming what it starts with.
Result<TensorMap> ReadMotionModuleFile(const std::string& path);

// The key maps between the original AnimateDiff names and diffusers': common/motion_export.h.

struct ModelSources {
  std::string unet2d;          // directory
  std::string motion_adapter;  // directory, optional with unet2d
  std::string unet_motion;     // directory (instead of the two above)
  // Original AnimateDiff safetensors, optional. Its architecture comes from `motion_adapter`'s
  // config.json when given, else AnimateDiff's (8 heads, 32 groups).
  std::string motion_module_file;
};

struct LoadedUNet {
  UNet3D model{nullptr};
  bool motion_loaded = false;  // false: fresh motion modules (proj_out zeroed)
  std::string motion_format;   // "diffusers", "animatediff" or "new"
};

// Builds the model from the sources' config.json files and loads their weights strictly.
// `norm` (model.motion_norm): kAcrossFrames / kPerFrame set the motion GroupNorm scope; kAuto
// takes the one the module records (`motion_norm` in config.json or the file's metadata), else
// the format's convention (diffusers: across frames, original AnimateDiff: per frame).
Result<LoadedUNet> LoadUNet3D(const ModelSources& sources, MotionNorm norm);

// Replaces the motion modules of `model` (built in their shape, e.g. a preset's) with a trained
// one: the MotionAdapter folder `adapter_dir`, or the AnimateDiff file `module_file` (which wins
// when both are given). Strict: every motion weight must be there with its shape.
Status LoadMotionModules(UNet3DImpl& model, const std::string& adapter_dir,
                         const std::string& module_file);

// Strictly copies `tensors` into the parameters/buffers of `module` whose names pass `select`;
// every selected name must be present with the right shape and no tensor may be left over.
Status LoadStrict(torch::nn::Module& module, const TensorMap& tensors,
                  const std::function<bool(const std::string&)>& select, const std::string& where);

// The trained motion modules as a diffusers MotionAdapter directory
// (diffusion_pytorch_model.safetensors + config.json, which records `motion_norm`), fp32.
Status SaveMotionAdapter(UNet3DImpl& model, const std::string& dir);
// The same in two halves, for writers that copy the tensors first (worker/train/
// checkpoint_saver.h): the live motion-module parameters and buffers under their diffusers
// names (not copied, any dtype) and the config.json text ...
TensorMap MotionAdapterTensors(UNet3DImpl& model);
std::string MotionAdapterConfig(UNet3DImpl& model);
// ... and the folder: `tensors` written fp32 as diffusion_pytorch_model.safetensors, plus
// config.json; `dir` is created.
Status WriteModelFolder(const std::string& dir, const TensorMap& tensors,
                        const std::string& config);
// The 2D UNet part as a UNet2DConditionModel directory (used to materialise presets).
Status SaveUNet2D(UNet3DImpl& model, const std::string& dir);

}  // namespace adctl

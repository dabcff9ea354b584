// The AnimateDiff UNet: an SD-style UNet2DConditionModel with motion modules after every
// ResNet (+ spatial attention) of the down and up blocks, and optionally one in the mid block
// (v2). Module names are diffusers `UNetMotionModel`'s, so a state dict walk is the key list.
//
// Input sample [B, C, F, H, W], timesteps [B], text states [B, L, D] (one per clip); output
// [B, C, F, H, W]. Frames are folded into the batch for all 2D ops (spec §2.1). Thread-
// compatible (a torch module).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/job_spec.h"
#include "worker/model/config.h"
#include "worker/model/layers.h"
#include "worker/model/motion_module.h"

namespace adctl {

// A down, mid or up block: resnets, optional attentions, motion modules, and a resampler.
class UNetBlockImpl : public torch::nn::Module {
 public:
  UNetBlockImpl() = default;
  torch::nn::ModuleList resnets{nullptr}, attentions{nullptr}, motion_modules{nullptr};
  torch::nn::ModuleList downsamplers{nullptr}, upsamplers{nullptr};
};
TORCH_MODULE(UNetBlock);

class UNet3DImpl : public torch::nn::Module {
 public:
  UNet3DImpl(const UNetConfig& unet, const MotionConfig& motion);

  torch::Tensor forward(const torch::Tensor& sample, const torch::Tensor& timesteps,
                        const torch::Tensor& text);

  // Trainable set: every parameter under "*.motion_modules.*", in registration order.
  std::vector<std::pair<std::string, torch::Tensor>> MotionParameters();
  // Freezes everything except the motion modules.
  void FreezeAllButMotionModules();
  // Fresh motion modules: PyTorch-default init with proj_out zeroed (identity at start).
  void ZeroInitMotionProjOut();
  // model.motion_max_frames: every motion module's positional table interpolated to `frames`
  // positions (MotionModuleImpl::ExtendPositions), and motion_config().max_seq_length with them,
  // so that checkpoints and exports keep the extended table. Nothing when they hold as many.
  void ExtendMotionPositions(int64_t frames);

  const UNetConfig& unet_config() const { return unet_; }
  const MotionConfig& motion_config() const { return motion_; }
  void set_norm_across_frames(bool v) { motion_.norm_across_frames = v; }
  void set_gradient_checkpointing(GradientCheckpointing v) { gradient_checkpointing_ = v; }
  // Channels-last feature maps ([B·F, H, W, C] in memory; the trainer's choice on CUDA with the
  // fused kernels): cuDNN convolves them without converting to and from NCHW around every
  // convolution, the transformers' tokens and the motion modules' rows are views of them, and
  // GroupNorm runs its channels-last kernels. Converts the convolution weights to match. Same
  // results either way (the layers read the layout of what they are given).
  void set_channels_last(bool on);
  bool channels_last() const { return channels_last_; }

 private:
  torch::Tensor RunMotion(torch::nn::ModuleList list, size_t i, const torch::Tensor& x,
                          int64_t frames);

  UNetConfig unet_;
  MotionConfig motion_;
  GradientCheckpointing gradient_checkpointing_ = GradientCheckpointing::kNone;
  bool channels_last_ = false;

  torch::nn::Conv2d conv_in{nullptr}, conv_out{nullptr};
  TimestepEmbedding time_embedding{nullptr};
  torch::nn::ModuleList down_blocks{nullptr}, up_blocks{nullptr};
  UNetBlock mid_block{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};
};
TORCH_MODULE(UNet3D);

// Checks that the motion config fits the UNet (layers per block, channels vs norm groups).
Status CheckMotionFitsUNet(const UNetConfig& unet, const MotionConfig& motion);

}  // namespace adctl

// Sampling videos from the AnimateDiff UNet: what diffusers' `AnimateDiffPipeline.__call__`
// does after its prompt encoding, in C++.
//
// DDIM (diffusion/ddpm.h) with classifier-free guidance: each step runs the UNet once on the
// batch [negative; positive] (the negative prompt's text states first, as diffusers
// concatenates them), ε = ε_uncond + g·(ε_text − ε_uncond), then the scheduler step. The final
// latents are divided by the VAE's scaling factor, decoded frame chunk by frame chunk, and
// mapped from [−1, 1] to [0, 1] (diffusers' VideoProcessor.postprocess_video, output "pt").
// Thread-compatible (the models are torch modules).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "worker/diffusion/ddpm.h"
#include "worker/model/unet3d.h"
#include "worker/model/vae.h"
#include "worker/video/rgb_frames.h"

namespace adctl {

struct GuidanceOptions {
  double guidance_scale = 8.0;  // ≤ 1: no classifier-free guidance (one UNet pass per step)
  int64_t decode_chunk = 16;    // frames per VAE decode call (≤ 0: all at once)
  // The dtype the UNet and VAE run in (their frozen weights'); the scheduler works in fp32.
  torch::ScalarType compute_dtype = torch::kFloat;
};

struct SampledClips {
  torch::Tensor latents;  // [B, C, F, h, w] fp32, the final latents (before the VAE)
  torch::Tensor video;    // [B, F, 3, H, W] fp32 in [0, 1]
};

// Denoises `latents_init` [B, C, F, h, w] (already scaled by the scheduler's init sigma, 1 for
// DDIM) under `prompt_embeds` [B, L, D], guided away from `negative_embeds` [B, L, D] (used only
// when guidance_scale > 1), and decodes the result. `generator` draws DDIM's eta noise.
SampledClips SampleClips(UNet3DImpl& unet, AutoencoderKLImpl& vae, const DdimScheduler& ddim,
                         const torch::Tensor& latents_init, const torch::Tensor& prompt_embeds,
                         const torch::Tensor& negative_embeds, const GuidanceOptions& options,
                         c10::optional<at::Generator> generator = c10::nullopt);

// Latents [N, C, F, h, w] → images [N, F, 3, H, W] in [0, 1] (fp32).
torch::Tensor DecodeLatentVideo(AutoencoderKLImpl& vae, const torch::Tensor& latents,
                                int64_t decode_chunk, torch::ScalarType compute_dtype);

// One clip [F, 3, H, W] in [0, 1] → uint8 RGB frames (x·255 rounded, as diffusers' export does).
RgbFrames ToRgbFrames(const torch::Tensor& clip);

}  // namespace adctl

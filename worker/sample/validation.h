// Validation samples during training, as AnimateDiff's trainer renders them: for each prompt
// of the spec's `validation` section, a clip sampled with the current motion modules (DDIM +
// classifier-free guidance, sampler.h), written as MP4 and animated GIF, plus one grid of all
// prompts per step, under <job-dir>/samples/step-NNNNNNNN/ with a samples.json index.
//
// Made once on rank 0: the VAE, text encoder and tokenizer come from model.pretrained; the
// prompts are encoded once and the text encoder is then freed. The initial latents come from
// validation.seed, so every validation step starts from the same noise and samples compare
// across steps. Not thread-safe; one per trainer.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/diffusion/ddpm.h"
#include "worker/model/unet3d.h"
#include "worker/model/vae.h"
#include "worker/report/reporter.h"
#include "worker/video/rgb_frames.h"

namespace adctl {

struct RenderedSample {
  int index = 0;
  std::string prompt;
  std::string mp4;  // absolute paths
  std::string gif;
  double seconds = 0;  // its sampling and files
};

struct ValidationRender {
  int64_t step = 0;
  std::string dir;
  std::vector<RenderedSample> samples;
  std::string grid_mp4, grid_gif;
  double seconds = 0;         // sampling + decoding + encoding the files
  double sample_seconds = 0;  // of which sampling and VAE decoding (the device's part)
};

// `render` as the report adctld records, with paths relative to `job_dir` (what it serves).
SamplesReport ToSamplesReport(const ValidationRender& render, const std::string& job_dir);

class ValidationRenderer {
 public:
  // `schedule` and `prediction_type`: the training noise schedule (the sampler's too).
  // Errors name the spec field or the model file (a size the UNet cannot take, too many frames,
  // a missing vae/ or tokenizer/).
  static Result<std::unique_ptr<ValidationRenderer>> Make(
      const JobSpec& spec, const UNet3DImpl& unet, const NoiseSchedule& schedule,
      PredictionType prediction_type, torch::Device device, torch::ScalarType compute_dtype,
      const std::string& job_dir);

  // Renders every prompt with `unet` as it is now; the UNet's mode is left as it was.
  Result<ValidationRender> Render(UNet3DImpl& unet, int64_t step);
  // Prompt `prompt`'s clip (DDIM + guidance + VAE decode), without writing files; `unet` must
  // be in eval mode.
  RgbFrames SampleClip(UNet3DImpl& unet, int64_t prompt);
  size_t num_prompts() const { return spec_.prompts.size(); }

 private:
  ValidationRenderer() = default;

  ValidationSpec spec_;
  std::string job_dir_;
  torch::Device device_{torch::kCPU};
  torch::ScalarType dtype_ = torch::kFloat;
  AutoencoderKL vae_{nullptr};
  std::unique_ptr<DdimScheduler> ddim_;
  torch::Tensor prompt_embeds_;    // [P, L, D]
  torch::Tensor negative_embeds_;  // [1, L, D]
  torch::Tensor latents_init_;     // [P, C, F, h, w] fp32
};

}  // namespace adctl

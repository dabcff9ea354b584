#include "worker/sample/sampler.h"

#include <cstring>

namespace adctl {

torch::Tensor DecodeLatentVideo(AutoencoderKLImpl& vae, const torch::Tensor& latents,
                                int64_t decode_chunk, torch::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  const int64_t b = latents.size(0), c = latents.size(1), f = latents.size(2);
  auto frames = (latents / vae.config().scaling_factor)
                    .permute({0, 2, 1, 3, 4})
                    .reshape({b * f, c, latents.size(3), latents.size(4)})
                    .to(compute_dtype);
  auto images = vae.DecodeChunked(frames, decode_chunk).to(torch::kFloat);
  images = images.reshape({b, f, images.size(1), images.size(2), images.size(3)});
  return (images / 2 + 0.5).clamp(0, 1);
}

SampledClips SampleClips(UNet3DImpl& unet, AutoencoderKLImpl& vae, const DdimScheduler& ddim,
                         const torch::Tensor& latents_init, const torch::Tensor& prompt_embeds,
                         const torch::Tensor& negative_embeds, const GuidanceOptions& options,
                         c10::optional<at::Generator> generator) {
  torch::NoGradGuard no_grad;
  const bool guided = options.guidance_scale > 1.0;
  const auto dtype = options.compute_dtype;
  auto text = guided ? torch::cat({negative_embeds, prompt_embeds}) : prompt_embeds;
  text = text.to(latents_init.device(), dtype);
  auto latents = latents_init.to(torch::kFloat);
  const auto timesteps = ddim.timesteps();
  for (int64_t i = 0; i < timesteps.size(0); ++i) {
    const int64_t t = timesteps[i].item<int64_t>();
    auto input = guided ? torch::cat({latents, latents}) : latents;
    auto ts = torch::full({input.size(0)}, t,
                          torch::TensorOptions().dtype(torch::kLong).device(latents.device()));
    auto eps = unet.forward(input.to(dtype), ts, text).to(torch::kFloat);
    if (guided) {
      auto parts = eps.chunk(2);
      eps = parts[0] + options.guidance_scale * (parts[1] - parts[0]);
    }
    latents = ddim.Step(eps, t, latents, generator);
  }
  return {latents, DecodeLatentVideo(vae, latents, options.decode_chunk, dtype)};
}

RgbFrames ToRgbFrames(const torch::Tensor& clip) {
  auto bytes = (clip.to(torch::kFloat) * 255)
                   .round()
                   .clamp(0, 255)
                   .to(torch::kUInt8)
                   .permute({0, 2, 3, 1})
                   .contiguous()
                   .cpu();
  RgbFrames out(static_cast<int>(clip.size(0)), static_cast<int>(clip.size(2)),
                static_cast<int>(clip.size(3)));
  std::memcpy(out.data.data(), bytes.data_ptr<uint8_t>(), out.data.size());
  return out;
}

}  // namespace adctl

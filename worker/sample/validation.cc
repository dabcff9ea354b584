#include "worker/sample/validation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/job_layout.h"
#include "worker/model/clip_text.h"
#include "worker/model/pretrained.h"
#include "worker/sample/sampler.h"
#include "worker/text/clip_tokenizer.h"
#include "worker/video/video_writer.h"

namespace adctl {

namespace fs = std::filesystem;

SamplesReport ToSamplesReport(const ValidationRender& render, const std::string& job_dir) {
  const auto relative = [&](const std::string& path) {
    return fs::path(path).lexically_relative(job_dir).generic_string();
  };
  SamplesReport report{render.step, render.seconds, render.dir, {}};
  const auto file = [&](int index, const std::string& prompt, const std::string& mp4,
                        const std::string& gif, double seconds) {
    SampleFile f;
    f.step = render.step;
    f.index = index;
    f.prompt = prompt;
    f.mp4 = relative(mp4);
    f.gif = relative(gif);
    f.render_seconds = seconds;
    report.files.push_back(std::move(f));
  };
  for (const RenderedSample& s : render.samples) file(s.index, s.prompt, s.mp4, s.gif, s.seconds);
  // The grid: the step's whole rendering.
  file(-1, "", render.grid_mp4, render.grid_gif, render.seconds);
  return report;
}

Result<std::unique_ptr<ValidationRenderer>> ValidationRenderer::Make(
    const JobSpec& spec, const UNet3DImpl& unet, const NoiseSchedule& schedule,
    PredictionType prediction_type, torch::Device device, torch::ScalarType compute_dtype,
    const std::string& job_dir) {
  const ValidationSpec& v = spec.validation;
  std::unique_ptr<ValidationRenderer> r(new ValidationRenderer());
  r->spec_ = v;
  r->job_dir_ = job_dir;
  r->device_ = device;
  r->dtype_ = compute_dtype;
  if (v.frames > unet.motion_config().max_seq_length) {
    return InvalidArgument("validation.frames: " + std::to_string(v.frames) +
                           ", the motion modules hold at most " +
                           std::to_string(unet.motion_config().max_seq_length));
  }
  const auto& pretrained = spec.model.pretrained;
  auto vae_dir = PretrainedComponent(pretrained, "vae");
  if (!vae_dir.ok()) return vae_dir.status();
  auto text_dir = PretrainedComponent(pretrained, "text_encoder");
  if (!text_dir.ok()) return text_dir.status();
  auto tok_dir = PretrainedComponent(pretrained, "tokenizer");
  if (!tok_dir.ok()) return tok_dir.status();

  auto vae = LoadAutoencoderKL(*vae_dir);
  if (!vae.ok()) return vae.status();
  r->vae_ = *vae;
  const int64_t factor = r->vae_->scale_factor();
  // The UNet halves the latent once per down block but the last.
  const int64_t unet_factor = int64_t{1} << (unet.unet_config().block_out_channels.size() - 1);
  for (auto [name, px] :
       {std::pair{"validation.height", v.height}, std::pair{"validation.width", v.width}}) {
    if (px % (factor * unet_factor) != 0) {
      return InvalidArgument(
          std::string(name) + ": " + std::to_string(px) + " pixels is not a multiple of " +
          std::to_string(factor * unet_factor) + " (the VAE's factor " + std::to_string(factor) +
          " times the UNet's " + std::to_string(unet_factor) + ")");
    }
  }
  if (r->vae_->config().latent_channels != unet.unet_config().in_channels) {
    return InvalidArgument(
        *vae_dir + ": the VAE has " + std::to_string(r->vae_->config().latent_channels) +
        " latent channels, the UNet takes " + std::to_string(unet.unet_config().in_channels));
  }
  r->vae_->to(device, compute_dtype);
  r->vae_->eval();

  {
    // The text encoder is needed only here: encode every prompt once, then let it go.
    auto tokenizer = ClipTokenizer::Load(*tok_dir);
    if (!tokenizer.ok()) return tokenizer.status();
    auto text = LoadClipTextModel(*text_dir);
    if (!text.ok()) return text.status();
    if ((*text)->config().hidden_size != unet.unet_config().cross_attention_dim) {
      return InvalidArgument(
          *text_dir + ": hidden size " + std::to_string((*text)->config().hidden_size) +
          ", the UNet cross-attends to " + std::to_string(unet.unet_config().cross_attention_dim));
    }
    (*text)->to(device);
    torch::NoGradGuard no_grad;
    r->prompt_embeds_ = EncodeCaptions(**text, *tokenizer, v.prompts);
    r->negative_embeds_ = EncodeCaptions(**text, *tokenizer, {v.negative_prompt});
  }

  DdimOptions o;
  o.num_inference_steps = v.steps;
  o.timestep_spacing = v.timestep_spacing;
  o.steps_offset = v.steps_offset;
  o.set_alpha_to_one = v.set_alpha_to_one;
  o.eta = v.eta;
  o.prediction_type = prediction_type;
  auto ddim = DdimScheduler::Make(schedule, o);
  if (!ddim.ok()) return ddim.status();
  r->ddim_ = std::make_unique<DdimScheduler>(*ddim);

  // One generator for all prompts, drawn in order (diffusers with one torch.Generator).
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(v.seed));
  const int64_t prompts = static_cast<int64_t>(v.prompts.size());
  r->latents_init_ = torch::randn(
      {prompts, unet.unet_config().in_channels, v.frames, v.height / factor, v.width / factor},
      gen);
  return r;
}

RgbFrames ValidationRenderer::SampleClip(UNet3DImpl& unet, int64_t p) {
  GuidanceOptions g;
  g.guidance_scale = spec_.guidance;
  g.decode_chunk = spec_.decode_chunk;
  g.compute_dtype = dtype_;
  // One prompt at a time: peak memory of one guided clip, whatever the prompt count.
  auto sampled = SampleClips(unet, *vae_, *ddim_, latents_init_.slice(0, p, p + 1).to(device_),
                             prompt_embeds_.slice(0, p, p + 1), negative_embeds_, g);
  return ToRgbFrames(sampled.video[0]);  // copies to the host: the device work is done
}

Result<ValidationRender> ValidationRenderer::Render(UNet3DImpl& unet, int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool was_training = unet.is_training();
  unet.eval();
  ValidationRender out;
  out.step = step;
  out.dir = JobLayout(job_dir_).samples_step(step);
  std::error_code ec;
  fs::create_directories(out.dir, ec);
  if (ec) return Internal(out.dir + ": cannot create: " + ec.message());

  std::vector<RgbFrames> clips;
  nlohmann::json index = {{"step", step}, {"samples", nlohmann::json::array()}};
  const double fps = static_cast<double>(spec_.fps);
  for (size_t i = 0; i < spec_.prompts.size(); ++i) {
    const auto p = static_cast<int64_t>(i);
    const auto s0 = std::chrono::steady_clock::now();
    clips.push_back(SampleClip(unet, p));
    out.sample_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    RenderedSample s;
    s.index = static_cast<int>(i);
    s.prompt = spec_.prompts[i];
    s.mp4 = out.dir + "/sample-" + std::to_string(i) + ".mp4";
    s.gif = out.dir + "/sample-" + std::to_string(i) + ".gif";
    ADCTL_RETURN_IF_ERROR(WriteMp4(s.mp4, clips.back(), fps));
    ADCTL_RETURN_IF_ERROR(WriteGif(s.gif, clips.back(), fps));
    index["samples"].push_back({{"index", s.index},
                                {"prompt", s.prompt},
                                {"mp4", fs::path(s.mp4).filename().string()},
                                {"gif", fs::path(s.gif).filename().string()}});
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    out.samples.push_back(std::move(s));
  }
  if (was_training) unet.train();
  const int columns = static_cast<int>(std::min<size_t>(clips.size(), 6));
  auto grid = TileClips(clips, columns);
  if (!grid.ok()) return grid.status();
  out.grid_mp4 = out.dir + "/grid.mp4";
  out.grid_gif = out.dir + "/grid.gif";
  ADCTL_RETURN_IF_ERROR(WriteMp4(out.grid_mp4, *grid, fps));
  ADCTL_RETURN_IF_ERROR(WriteGif(out.grid_gif, *grid, fps));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  index["grid_mp4"] = "grid.mp4";
  index["grid_gif"] = "grid.gif";
  index["seconds"] = out.seconds;
  index["sample_seconds"] = out.sample_seconds;
  index["frames"] = spec_.frames;
  index["height"] = spec_.height;
  index["width"] = spec_.width;
  index["steps"] = spec_.steps;
  index["guidance"] = spec_.guidance;
  index["seed"] = spec_.seed;
  const std::string tmp = out.dir + "/samples.json.tmp";
  {
    std::ofstream f(tmp);
    f << index.dump(2) << "\n";
    if (!f) return Internal(tmp + ": write failed");
  }
  fs::rename(tmp, out.dir + "/samples.json", ec);
  if (ec) return Internal(out.dir + "/samples.json: " + ec.message());
  return out;
}

}  // namespace adctl

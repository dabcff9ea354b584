#include "worker/tools/parity.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "common/worker_contract.h"
#include "worker/diffusion/ddpm.h"
#include "worker/model/clip_text.h"
#include "worker/model/lora.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"
#include "worker/sample/sampler.h"
#include "worker/train/optimizer.h"

namespace adctl {

namespace {

// Reads `in` and checks it holds `keys`; logs and returns the exit code on failure.
int ReadInput(const std::string& in, std::initializer_list<const char*> keys, TensorMap& io) {
  auto read = ReadTensorFile(in);
  if (!read.ok()) {
    spdlog::error("{}", read.status().ToString());
    return kExitDataError;
  }
  for (const char* key : keys) {
    if (!read->count(key)) {
      spdlog::error("{}: missing tensor '{}'", in, key);
      return kExitDataError;
    }
  }
  io = std::move(*read);
  return kExitOk;
}

// The UNet with its motion modules trainable, or the exit code after logging why not.
int LoadUNet(const ModelSources& sources, UNet3D& model) {
  // Parity is against diffusers: its GroupNorm scope unless the sources record another.
  auto loaded = LoadUNet3D(sources, MotionNorm::kAuto);
  if (!loaded.ok()) {
    spdlog::error("{}", loaded.status().ToString());
    return kExitModelError;
  }
  model = loaded->model;
  model->FreezeAllButMotionModules();
  return kExitOk;
}

// The UNet's prediction on the fixture batch and its MSE loss against `target`.
std::pair<torch::Tensor, torch::Tensor> UNetLoss(UNet3DImpl& model, TensorMap& t) {
  auto pred = model.forward(t["sample"].to(torch::kFloat), t["timesteps"],
                            t["encoder_hidden_states"].to(torch::kFloat));
  return {pred, torch::mse_loss(pred, t["target"].to(torch::kFloat))};
}

int Write(const std::string& out, const TensorMap& result) {
  auto st = WriteTensorFile(out, result);
  if (!st.ok()) {
    spdlog::error("{}", st.ToString());
    return kExitCrash;
  }
  std::string names;
  for (const auto& [name, t] : result) names += (names.empty() ? "" : ", ") + name;
  spdlog::info("wrote {} to {}", names, out);
  return kExitOk;
}

}  // namespace

int CheckTextEncoderParity(const std::string& dir, const std::string& in, const std::string& out) {
  auto model = LoadClipTextModel(dir);
  if (!model.ok()) {
    spdlog::error("{}", model.status().ToString());
    return kExitModelError;
  }
  TensorMap io;
  if (const int rc = ReadInput(in, {"input_ids"}, io); rc != kExitOk) return rc;
  torch::NoGradGuard no_grad;
  auto result = (*model)->forward(io["input_ids"]);
  return Write(out, {{"last_hidden_state", result.last_hidden_state}, {"pooled", result.pooled}});
}

int CheckVaeParity(const std::string& dir, const std::string& in, const std::string& out) {
  auto vae = LoadAutoencoderKL(dir);
  if (!vae.ok()) {
    spdlog::error("{}", vae.status().ToString());
    return kExitModelError;
  }
  TensorMap io;
  if (const int rc = ReadInput(in, {"image"}, io); rc != kExitOk) return rc;
  torch::NoGradGuard no_grad;
  auto dist = (*vae)->Encode(io["image"].to(torch::kFloat));
  auto decoded = (*vae)->Decode(dist.mean);
  return Write(out, {{"mean", dist.mean}, {"logvar", dist.logvar}, {"decoded", decoded}});
}

namespace {

// The model and one training batch (sample, timesteps, encoder_hidden_states, target).
int LoadUNetAndBatch(const ModelSources& sources, const std::string& in, UNet3D& model,
                     TensorMap& io) {
  if (const int rc = LoadUNet(sources, model); rc != kExitOk) return rc;
  return ReadInput(in, {"sample", "timesteps", "encoder_hidden_states", "target"}, io);
}

}  // namespace

int CheckUNetParity(const ModelSources& sources, const std::string& in, const std::string& out) {
  UNet3D model{nullptr};
  TensorMap io;
  if (const int rc = LoadUNetAndBatch(sources, in, model, io); rc != kExitOk) return rc;
  auto [pred, loss] = UNetLoss(*model, io);
  loss.backward();
  TensorMap result{{"pred", pred.detach()}, {"loss", loss.detach().reshape({1})}};
  for (const auto& [name, p] : model->MotionParameters()) result[name] = p.grad();
  spdlog::info("loss {:.8f}", loss.item<double>());
  return Write(out, result);
}

int CheckMotionLoraParity(const ModelSources& sources, const std::string& lora,
                          const std::string& in, const std::string& out) {
  UNet3D model{nullptr};
  TensorMap io;
  if (const int rc = LoadUNetAndBatch(sources, in, model, io); rc != kExitOk) return rc;
  for (auto& p : model->parameters()) p.set_requires_grad(false);  // only the adapters learn
  auto adapters = LoraAdapters::Load(*model, lora);
  if (!adapters.ok()) {
    spdlog::error("{}", adapters.status().ToString());
    return kExitModelError;
  }
  spdlog::info("LoRA rank {} alpha {} on {} projections ({} parameters)", adapters->rank(),
               adapters->alpha(), adapters->size(), adapters->parameter_count());
  auto [pred, loss] = UNetLoss(*model, io);
  loss.backward();
  TensorMap result{{"pred", pred.detach()}, {"loss", loss.detach().reshape({1})}};
  for (const auto& [name, p] : adapters->Parameters()) result["unet." + name] = p.grad();
  spdlog::info("loss {:.8f}", loss.item<double>());
  return Write(out, result);
}

Result<TensorMap> RunAdamWSteps(UNet3DImpl& model, const TensorMap& io_in,
                                const AdamWParityOptions& options) {
  TensorMap io = io_in;
  TrainSpec spec;
  spec.lr = options.lr;
  spec.warmup_steps = options.warmup_steps;
  spec.max_grad_norm = options.max_grad_norm;
  spec.weight_decay = options.weight_decay;
  spec.lr_schedule = LrSchedule::kConstant;
  spec.max_steps = options.steps;
  AdamW optimizer(model.MotionParameters(), spec);
  TensorMap out;
  for (int64_t step = 0; step < options.steps; ++step) {
    const std::string n = std::to_string(step);
    const double lr = LearningRate(spec, step);
    auto loss = UNetLoss(model, io).second;
    loss.backward();
    auto norm = optimizer.ClipGradNorm(spec.max_grad_norm);
    optimizer.Step(lr);
    optimizer.ZeroGrad(options.release_grads);
    out["loss." + n] = loss.detach().reshape({1});
    out["lr." + n] = torch::tensor({lr}, torch::kDouble);
    out["grad_norm." + n] = norm.reshape({1});
  }
  for (const auto& [name, p] : model.MotionParameters()) out["param." + name] = p.detach();
  return out;
}

int CheckAdamWParity(const ModelSources& sources, const std::string& in,
                     const AdamWParityOptions& options, const std::string& out) {
  UNet3D model{nullptr};
  TensorMap io;
  if (const int rc = LoadUNetAndBatch(sources, in, model, io); rc != kExitOk) return rc;
  auto result = RunAdamWSteps(*model, io, options);
  if (!result.ok()) {
    spdlog::error("{}", result.status().ToString());
    return kExitCrash;
  }
  return Write(out, *result);
}

Result<TensorMap> RunSamplingParity(UNet3DImpl& unet, AutoencoderKLImpl& vae, const TensorMap& io,
                                    const nlohmann::json& sampling) {
  for (const char* key : {"latents_init", "prompt_embeds", "negative_prompt_embeds"}) {
    if (!io.count(key))
      return InvalidArgument(std::string("sampling io: missing tensor '") + key + "'");
  }
  auto schedule = NoiseSchedule::Make(BetaSchedule::kLinear, 0.00085, 0.012, 1000);
  if (!schedule.ok()) return schedule.status();
  TensorMap out;
  try {
    GuidanceOptions guidance;
    guidance.guidance_scale = sampling.at("guidance_scale").get<double>();
    for (const auto& [run, alpha_one] : sampling.at("set_alpha_to_one").items()) {
      DdimOptions o;
      o.num_inference_steps = sampling.at("num_inference_steps").get<int64_t>();
      o.eta = sampling.value("eta", 0.0);
      o.set_alpha_to_one = alpha_one.get<bool>();
      auto ddim = DdimScheduler::Make(*schedule, o);
      if (!ddim.ok()) return ddim.status();
      auto clips = SampleClips(unet, vae, *ddim, io.at("latents_init").to(torch::kFloat),
                               io.at("prompt_embeds").to(torch::kFloat),
                               io.at("negative_prompt_embeds").to(torch::kFloat), guidance);
      out[run + ".latents"] = clips.latents;
      out[run + ".video"] = clips.video;
      out[run + ".timesteps"] = ddim->timesteps();
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("sampling settings: ") + e.what());
  }
  return out;
}

int CheckSamplingParity(const ModelSources& sources, const std::string& vae_dir,
                        const std::string& in, const std::string& out) {
  UNet3D model{nullptr};
  if (const int rc = LoadUNet(sources, model); rc != kExitOk) return rc;
  auto vae = LoadAutoencoderKL(vae_dir);
  if (!vae.ok()) {
    spdlog::error("{}", vae.status().ToString());
    return kExitModelError;
  }
  TensorMap io;
  if (const int rc = ReadInput(in, {"latents_init", "prompt_embeds", "negative_prompt_embeds"}, io);
      rc != kExitOk) {
    return rc;
  }
  // The settings: README.json beside the io file (its "sampling" section), as the fixture has.
  const auto readme = std::filesystem::path(in).parent_path() / "README.json";
  std::ifstream f(readme);
  if (!f) {
    spdlog::error(
        "{}: not found (the sampling settings: num_inference_steps, guidance_scale, "
        "eta, set_alpha_to_one)",
        readme.string());
    return kExitDataError;
  }
  nlohmann::json settings;
  try {
    settings = nlohmann::json::parse(f).at("sampling");
  } catch (const std::exception& e) {
    spdlog::error("{}: no usable \"sampling\" section: {}", readme.string(), e.what());
    return kExitDataError;
  }
  auto result = RunSamplingParity(*model, **vae, io, settings);
  if (!result.ok()) {
    spdlog::error("{}", result.status().ToString());
    return kExitDataError;
  }
  return Write(out, *result);
}

}  // namespace adctl

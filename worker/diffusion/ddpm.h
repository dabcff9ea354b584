// Diffusion schedules: DDPM training noise (add_noise, epsilon and v targets) and DDIM
// sampling steps, matching diffusers' DDPMScheduler / DDIMScheduler (float32, 1000 steps).
// AnimateDiff trains with the linear β schedule 0.00085 → 0.012 (its configs/training yaml).
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

class NoiseSchedule {
 public:
  // kLinear: β_i = linspace(start, end); kScaledLinear: β_i = linspace(√start, √end)².
  // kPretrained is not a schedule of its own (the caller reads model.pretrained's scheduler
  // config first, worker/model/pretrained.h): an error here.
  static Result<NoiseSchedule> Make(BetaSchedule beta_schedule, double beta_start, double beta_end,
                                    int64_t num_train_timesteps);

  const torch::Tensor& alphas_cumprod() const { return alphas_cumprod_; }  // [T], fp32, CPU
  int64_t num_train_timesteps() const { return alphas_cumprod_.size(0); }

  // x_t = √ᾱ_t·x0 + √(1−ᾱ_t)·ε, t [B] broadcast over the other dims of x0 [B, ...].
  torch::Tensor AddNoise(const torch::Tensor& x0, const torch::Tensor& noise,
                         const torch::Tensor& t) const;
  // v = √ᾱ_t·ε − √(1−ᾱ_t)·x0 (v-prediction target).
  torch::Tensor Velocity(const torch::Tensor& x0, const torch::Tensor& noise,
                         const torch::Tensor& t) const;

 private:
  torch::Tensor Gather(const torch::Tensor& t, const torch::Tensor& like,
                       bool sqrt_one_minus) const;
  torch::Tensor alphas_cumprod_;
};

// DDIM sampling as diffusers' DDIMScheduler does it (AnimateDiff's validation sampler).
struct DdimOptions {
  int64_t num_inference_steps = 25;
  // Leading: AnimateDiff's and SD1.5's scheduler config.
  TimestepSpacing timestep_spacing = TimestepSpacing::kLeading;
  int64_t steps_offset = 1;
  // The last step's ᾱ_prev: 1 (true, AnimateDiff's validation config) or ᾱ_0 (false).
  bool set_alpha_to_one = true;
  double eta = 0;  // 0: deterministic DDIM; 1: DDPM-like ancestral noise
  PredictionType prediction_type = PredictionType::kEpsilon;
  bool clip_sample = false;
  double clip_sample_range = 1.0;
};

class DdimScheduler {
 public:
  // Checks the options against the training schedule (spacing name, step count).
  static Result<DdimScheduler> Make(const NoiseSchedule& schedule, const DdimOptions& options);

  // The run's timesteps, descending, int64 [num_inference_steps].
  const torch::Tensor& timesteps() const { return timesteps_; }
  // x_{t-1} from x_t and the model output at timestep t. `generator` draws the eta > 0 noise
  // (unused when eta is 0). Works in the dtype and on the device of `x_t`.
  torch::Tensor Step(const torch::Tensor& model_output, int64_t t, const torch::Tensor& x_t,
                     c10::optional<at::Generator> generator = c10::nullopt) const;

 private:
  torch::Tensor alphas_cumprod_;  // fp32 CPU, read as doubles per step
  torch::Tensor timesteps_;
  DdimOptions options_;
  int64_t step_ratio_ = 1;
};

}  // namespace adctl

// Diffusion schedules: DDPM training noise (add_noise, epsilon and v targets) and DDIM
// sampling steps, matching diffusers' DDPMScheduler / DDIMScheduler (float32, 1000 steps).
// AnimateDiff trains with the linear β schedule 0.00085 → 0.012 (its configs/training yaml).
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/status.h"

namespace adctl {

class NoiseSchedule {
 public:
  // beta_schedule: "linear" (β_i = linspace(start, end)) or "scaled_linear"
  // (β_i = linspace(√start, √end)²).
  static Result<NoiseSchedule> Make(const std::string& beta_schedule, double beta_start,
                                    double beta_end, int64_t num_train_timesteps);

  const torch::Tensor& alphas_cumprod() const { return alphas_cumprod_; }  // [T], fp32, CPU
  int64_t num_train_timesteps() const { return alphas_cumprod_.size(0); }

  // x_t = √ᾱ_t·x0 + √(1−ᾱ_t)·ε, t [B] broadcast over the other dims of x0 [B, ...].
  torch::Tensor AddNoise(const torch::Tensor& x0, const torch::Tensor& noise,
                         const torch::Tensor& t) const;
  // v = √ᾱ_t·ε − √(1−ᾱ_t)·x0 (v-prediction target).
  torch::Tensor Velocity(const torch::Tensor& x0, const torch::Tensor& noise,
                         const torch::Tensor& t) const;

  // DDIM ("leading" spacing, steps_offset, set_alpha_to_one false as in AnimateDiff's config):
  // the timesteps of an n-step run, descending.
  torch::Tensor DdimTimesteps(int64_t num_inference_steps, int64_t steps_offset = 1) const;
  // One deterministic (eta 0) DDIM step from x_t with predicted ε at timestep t.
  torch::Tensor DdimStep(const torch::Tensor& eps, int64_t t, const torch::Tensor& x_t,
                         int64_t num_inference_steps) const;

 private:
  torch::Tensor Gather(const torch::Tensor& t, const torch::Tensor& like,
                       bool sqrt_one_minus) const;
  torch::Tensor alphas_cumprod_;
};

}  // namespace adctl

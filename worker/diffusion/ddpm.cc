#include "worker/diffusion/ddpm.h"

#include <cmath>

namespace adctl {

Result<NoiseSchedule> NoiseSchedule::Make(BetaSchedule beta_schedule, double beta_start,
                                          double beta_end, int64_t num_train_timesteps) {
  torch::Tensor betas;
  switch (beta_schedule) {
    case BetaSchedule::kLinear:
      betas = torch::linspace(beta_start, beta_end, num_train_timesteps, torch::kFloat);
      break;
    case BetaSchedule::kScaledLinear:
      betas = torch::linspace(std::sqrt(beta_start), std::sqrt(beta_end), num_train_timesteps,
                              torch::kFloat)
                  .pow(2);
      break;
    case BetaSchedule::kPretrained:
      return InvalidArgument(
          "train.beta_schedule: 'pretrained' names no schedule until model.pretrained's "
          "scheduler config is read (linear, scaled_linear)");
  }
  NoiseSchedule s;
  s.alphas_cumprod_ = torch::cumprod(1.0 - betas, 0);
  return s;
}

torch::Tensor NoiseSchedule::Gather(const torch::Tensor& t, const torch::Tensor& like,
                                    bool sqrt_one_minus) const {
  auto a = alphas_cumprod_.to(like.device()).index_select(0, t.to(like.device()).to(torch::kLong));
  a = sqrt_one_minus ? (1.0 - a).sqrt() : a.sqrt();
  std::vector<int64_t> shape(like.dim(), 1);
  shape[0] = like.size(0);
  return a.view(shape).to(like.scalar_type());
}

torch::Tensor NoiseSchedule::AddNoise(const torch::Tensor& x0, const torch::Tensor& noise,
                                      const torch::Tensor& t) const {
  return Gather(t, x0, false) * x0 + Gather(t, x0, true) * noise;
}

torch::Tensor NoiseSchedule::Velocity(const torch::Tensor& x0, const torch::Tensor& noise,
                                      const torch::Tensor& t) const {
  return Gather(t, x0, false) * noise - Gather(t, x0, true) * x0;
}

Result<DdimScheduler> DdimScheduler::Make(const NoiseSchedule& schedule, const DdimOptions& o) {
  const int64_t T = schedule.num_train_timesteps();
  const int64_t n = o.num_inference_steps;
  if (n < 1 || n > T) {
    return InvalidArgument("sampling steps: " + std::to_string(n) + " (1 to " + std::to_string(T) +
                           ")");
  }
  DdimScheduler s;
  s.alphas_cumprod_ = schedule.alphas_cumprod().to(torch::kDouble);
  s.options_ = o;
  s.step_ratio_ = T / n;
  // diffusers DDIMScheduler.set_timesteps: the three spacings of "Common Diffusion Noise
  // Schedules and Sample Steps are Flawed", table 2.
  switch (o.timestep_spacing) {
    case TimestepSpacing::kLeading:
      s.timesteps_ = torch::arange(0, n, torch::kLong).mul(s.step_ratio_).flip(0) + o.steps_offset;
      break;
    case TimestepSpacing::kTrailing: {
      const double ratio = static_cast<double>(T) / static_cast<double>(n);
      s.timesteps_ = torch::arange(static_cast<double>(T), 0.0, -ratio, torch::kDouble)
                         .round()
                         .to(torch::kLong) -
                     1;
      break;
    }
    case TimestepSpacing::kLinspace:
      s.timesteps_ = torch::linspace(0, static_cast<double>(T - 1), n, torch::kDouble)
                         .round()
                         .flip(0)
                         .to(torch::kLong);
      break;
  }
  return s;
}

torch::Tensor DdimScheduler::Step(const torch::Tensor& model_output, int64_t t,
                                  const torch::Tensor& x_t,
                                  c10::optional<at::Generator> generator) const {
  const auto* ac = alphas_cumprod_.data_ptr<double>();
  const int64_t prev_t = t - step_ratio_;
  // diffusers computes these as fp32 tensors; so do we, then broadcast as scalars.
  const float a_t = static_cast<float>(ac[t]);
  const float a_prev = prev_t >= 0 ? static_cast<float>(ac[prev_t])
                                   : (options_.set_alpha_to_one ? 1.0f : static_cast<float>(ac[0]));
  const float b_t = 1.0f - a_t;
  torch::Tensor x0, eps;
  if (options_.prediction_type == PredictionType::kEpsilon) {
    x0 = (x_t - std::sqrt(b_t) * model_output) / std::sqrt(a_t);
    eps = model_output;
  } else {
    x0 = std::sqrt(a_t) * x_t - std::sqrt(b_t) * model_output;
    eps = std::sqrt(a_t) * model_output + std::sqrt(b_t) * x_t;
  }
  if (options_.clip_sample) {
    x0 = x0.clamp(-options_.clip_sample_range, options_.clip_sample_range);
  }
  // σ_t = η·√((1−ᾱ_prev)/(1−ᾱ_t)·(1−ᾱ_t/ᾱ_prev)) (DDIM paper eq. 16).
  const float variance = (1.0f - a_prev) / (1.0f - a_t) * (1.0f - a_t / a_prev);
  const float sigma = static_cast<float>(options_.eta) * std::sqrt(std::max(variance, 0.0f));
  const float dir = std::sqrt(std::max(1.0f - a_prev - sigma * sigma, 0.0f));
  auto prev = std::sqrt(a_prev) * x0 + dir * eps;
  if (options_.eta > 0) {
    auto noise =
        torch::randn(x_t.sizes(), generator, x_t.options().device(torch::kCPU)).to(x_t.device());
    prev = prev + sigma * noise;
  }
  return prev;
}

}  // namespace adctl

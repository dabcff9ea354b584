#include "worker/diffusion/ddpm.h"

namespace adctl {

Result<NoiseSchedule> NoiseSchedule::Make(const std::string& beta_schedule, double beta_start,
                                          double beta_end, int64_t num_train_timesteps) {
  torch::Tensor betas;
  if (beta_schedule == "linear") {
    betas = torch::linspace(beta_start, beta_end, num_train_timesteps, torch::kFloat);
  } else if (beta_schedule == "scaled_linear") {
    betas = torch::linspace(std::sqrt(beta_start), std::sqrt(beta_end), num_train_timesteps,
                            torch::kFloat)
                .pow(2);
  } else {
    return InvalidArgument("train.beta_schedule: unknown schedule '" + beta_schedule +
                           "' (linear, scaled_linear)");
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

torch::Tensor NoiseSchedule::DdimTimesteps(int64_t num_inference_steps,
                                           int64_t steps_offset) const {
  const int64_t ratio = num_train_timesteps() / num_inference_steps;
  auto ts = torch::arange(0, num_inference_steps, torch::kLong) * ratio + steps_offset;
  return ts.flip(0);
}

torch::Tensor NoiseSchedule::DdimStep(const torch::Tensor& eps, int64_t t, const torch::Tensor& x_t,
                                      int64_t num_inference_steps) const {
  const int64_t prev_t = t - num_train_timesteps() / num_inference_steps;
  auto ac = alphas_cumprod_;
  auto a_t = ac[t];
  // set_alpha_to_one = false: the final step uses ᾱ_0.
  auto a_prev = prev_t >= 0 ? ac[prev_t] : ac[0];
  auto x0 = (x_t - (1 - a_t).sqrt() * eps) / a_t.sqrt();
  return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps;
}

}  // namespace adctl

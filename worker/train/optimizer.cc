#include "worker/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "worker/compat.h"

namespace adctl {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, const TrainSpec& spec,
             bool allow_fused)
    : beta1_(spec.beta1), beta2_(spec.beta2), eps_(spec.eps), weight_decay_(spec.weight_decay) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params) {
    names_.push_back(name);
    params_.push_back(p);
    exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  const bool same_fp32_device = std::all_of(params_.begin(), params_.end(), [&](const auto& p) {
    return p.is_cuda() && p.scalar_type() == torch::kFloat && p.device() == params_[0].device();
  });
  if (allow_fused && compat::kHasFusedAdamW && !params_.empty() && same_fp32_device) {
    fused_step_ = torch::zeros({}, params_[0].options());
  }
}

std::vector<torch::Tensor> AdamW::Grads() {
  std::vector<torch::Tensor> grads;
  grads.reserve(params_.size());
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  return grads;
}

void AdamW::ZeroGrad(bool release) {
  torch::NoGradGuard no_grad;
  if (release) {
    for (auto& p : params_) p.mutable_grad().reset();
    return;
  }
  at::_foreach_zero_(Grads());
}

torch::Tensor AdamW::ClipGradNorm(double max_norm) {
  torch::NoGradGuard no_grad;
  auto grads = Grads();
  // One multi-tensor kernel for the per-tensor norms, then the norm of those.
  const auto total = torch::stack(at::_foreach_norm(grads)).to(torch::kFloat).norm();
  if (max_norm > 0) {
    // min(1, max_norm / (norm + 1e-6)), applied on the device (torch.nn.utils.clip_grad_norm_).
    const auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    compat::ForeachMulByTensor(grads, coef);
  }
  return total;
}

void AdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  auto grads = Grads();
  if (fused_step_.defined()) {
    fused_step_.fill_(static_cast<double>(step_));
    if (compat::FusedAdamW(params_, grads, exp_avg_, exp_avg_sq_, fused_step_, lr, beta1_, beta2_,
                           weight_decay_, eps_)) {
      return;
    }
  }
  // p ← p·(1 − lr·wd); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
  // p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε).     (torch/optim/adamw.py, _multi_tensor)
  if (weight_decay_ != 0) at::_foreach_mul_(params_, 1.0 - lr * weight_decay_);
  at::_foreach_mul_(exp_avg_, beta1_);
  at::_foreach_add_(exp_avg_, grads, 1.0 - beta1_);
  at::_foreach_mul_(exp_avg_sq_, beta2_);
  at::_foreach_addcmul_(exp_avg_sq_, grads, grads, 1.0 - beta2_);
  const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(step_));
  auto denom = at::_foreach_sqrt(exp_avg_sq_);
  at::_foreach_div_(denom, std::sqrt(bias2));
  at::_foreach_add_(denom, eps_);
  at::_foreach_addcdiv_(params_, exp_avg_, denom, -lr / bias1);
}

TensorMap AdamW::StateDict() const {
  TensorMap out;
  for (size_t i = 0; i < names_.size(); ++i) {
    out["exp_avg." + names_[i]] = exp_avg_[i];
    out["exp_avg_sq." + names_[i]] = exp_avg_sq_[i];
  }
  out["step"] = torch::tensor({step_}, torch::kLong);
  return out;
}

Status AdamW::LoadStateDict(const TensorMap& state) {
  torch::NoGradGuard no_grad;
  auto step = state.find("step");
  if (step == state.end()) return DataLoss("optimizer state: no 'step'");
  for (size_t i = 0; i < names_.size(); ++i) {
    for (auto* pair : {&exp_avg_, &exp_avg_sq_}) {
      const std::string key = (pair == &exp_avg_ ? "exp_avg." : "exp_avg_sq.") + names_[i];
      auto it = state.find(key);
      if (it == state.end()) return DataLoss("optimizer state: missing '" + key + "'");
      if (it->second.sizes() != (*pair)[i].sizes()) {
        return DataLoss("optimizer state: '" + key + "' has the wrong shape");
      }
      (*pair)[i].copy_(it->second);
    }
  }
  if (state.size() != 2 * names_.size() + 1) {
    return DataLoss("optimizer state: " + std::to_string(state.size()) + " tensors, expected " +
                    std::to_string(2 * names_.size() + 1));
  }
  step_ = step->second.item<int64_t>();
  return Status::Ok();
}

double LearningRate(const TrainSpec& spec, int64_t step) {
  // diffusers' get_scheduler (LambdaLR): step s runs at lr·s/warmup during warm-up, so the
  // first step runs at lr 0 (the moments still update).
  if (spec.warmup_steps > 0 && step < spec.warmup_steps) {
    return spec.lr * static_cast<double>(step) / static_cast<double>(spec.warmup_steps);
  }
  if (spec.lr_schedule == LrSchedule::kCosine) {
    const double span = std::max<int64_t>(1, spec.max_steps - spec.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(step - spec.warmup_steps) / span);
    return spec.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return spec.lr;
}

}  // namespace adctl

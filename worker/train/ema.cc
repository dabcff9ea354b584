#include "worker/train/ema.h"

#include <torch/version.h>

#include <algorithm>

#include "worker/compat.h"

#if defined(ADCTL_WITH_CUDA) && TORCH_VERSION_MAJOR >= 2
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define ADCTL_EMA_SIDE_STREAM 1
#endif

namespace adctl {

#ifdef ADCTL_EMA_SIDE_STREAM
// A stream of the pool for the update, and the events that order it: after the optimizer step
// (queued), before the next one (Sync). The update is memory-bound; the next forward's
// convolutions are not, so the two overlap.
struct Ema::SideStream {
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent stepped, updated;
  bool pending = false;
};
#else
struct Ema::SideStream {};
#endif

Ema::~Ema() = default;

Ema::Ema(const EmaSpec& spec, NamedTensors params) : spec_(spec), params_(std::move(params)) {
  torch::NoGradGuard no_grad;
  const bool host = spec_.device == EmaDevice::kCpu;
  for (const auto& [name, p] : params_) {
    auto avg = p.detach().to(host ? torch::kCPU : p.device(), torch::kFloat, /*non_blocking=*/false,
                             /*copy=*/true);
    averages_.emplace_back(name, std::move(avg));
  }
}

double Ema::Decay(const EmaSpec& spec, int64_t k) {
  const int64_t update_after = spec.start_step / std::max<int64_t>(spec.update_every, 1);
  const int64_t n = std::max<int64_t>(0, k - update_after - 1);
  if (n <= 0) return 0.0;
  const double warm = (1.0 + static_cast<double>(n)) / (10.0 + static_cast<double>(n));
  return std::min(warm, spec.decay);
}

bool Ema::AfterStep(int64_t step) {
  if (step % std::max<int64_t>(spec_.update_every, 1) != 0) return false;
  Update();
  return true;
}

void Ema::Update() {
  torch::NoGradGuard no_grad;
  ++updates_;
  last_decay_ = Decay(spec_, updates_);
  std::vector<torch::Tensor> avgs, weights;
  avgs.reserve(averages_.size());
  weights.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    avgs.push_back(averages_[i].second);
    const torch::Tensor& p = params_[i].second;
    weights.push_back(p.device() == avgs.back().device() && p.scalar_type() == torch::kFloat
                          ? p.detach()
                          : p.detach().to(avgs.back().device(), torch::kFloat));
  }
#ifdef ADCTL_EMA_SIDE_STREAM
  if (!avgs.empty() && avgs[0].is_cuda()) {
    if (!side_) side_ = std::make_unique<SideStream>();
    const auto main = c10::cuda::getCurrentCUDAStream();
    side_->stepped.record(main);
    side_->stepped.block(side_->stream);
    {
      c10::cuda::CUDAStreamGuard guard(side_->stream);
      compat::ForeachLerp(avgs, weights, 1.0 - last_decay_);
    }
    side_->updated.record(side_->stream);
    side_->pending = true;
    return;
  }
#endif
  compat::ForeachLerp(avgs, weights, 1.0 - last_decay_);
}

void Ema::Sync() {
#ifdef ADCTL_EMA_SIDE_STREAM
  if (side_ && side_->pending) {
    side_->updated.block(c10::cuda::getCurrentCUDAStream());
    side_->pending = false;
  }
#endif
}

void Ema::Reset() {
  Sync();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) averages_[i].second.copy_(params_[i].second.detach());
  updates_ = 0;
  last_decay_ = 0;
}

Status Ema::Restore(const std::map<std::string, torch::Tensor>& by_name, int64_t updates,
                    const std::string& prefix) {
  Sync();
  torch::NoGradGuard no_grad;
  for (auto& [name, avg] : averages_) {
    const auto it = by_name.find(prefix + name);
    if (it == by_name.end()) return DataLoss("ema: no average for " + prefix + name);
    if (it->second.sizes() != avg.sizes()) {
      return DataLoss("ema: " + prefix + name + " has the wrong shape");
    }
    avg.copy_(it->second);
  }
  updates_ = updates;
  last_decay_ = updates > 0 ? Decay(spec_, updates) : 0.0;
  return Status::Ok();
}

Ema::Applied::Applied(Ema* ema) : ema_(ema) {
  ema_->Sync();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema_->params_.size(); ++i) {
    torch::Tensor p = ema_->params_[i].second;
    saved_.push_back(p.detach().clone());
    p.detach().copy_(ema_->averages_[i].second);
  }
}

Ema::Applied::~Applied() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < saved_.size(); ++i) ema_->params_[i].second.detach().copy_(saved_[i]);
}

}  // namespace adctl

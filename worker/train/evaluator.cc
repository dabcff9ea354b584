#include "worker/train/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "worker/data/sampler.h"

namespace adctl {

Evaluator::Evaluator(std::shared_ptr<const LatentDataset> clips, const EvalSpec& spec,
                     const NoiseSchedule& schedule, PredictionType prediction, torch::Device device,
                     torch::ScalarType compute_dtype)
    : clips_(std::move(clips)),
      weights_(spec.weights),
      timesteps_(spec.timesteps),
      seed_(static_cast<uint64_t>(spec.seed)),
      schedule_(schedule),
      prediction_(prediction),
      device_(device),
      compute_dtype_(compute_dtype) {}

EvalLoss Evaluator::Run(UNet3DImpl& model, Communicator* comm, int rank, int world_size) const {
  const int64_t n = clips_->size();
  const int64_t t_count = static_cast<int64_t>(timesteps_.size());
  // Slot (i, j): clip i at timesteps_[j]; one rank fills each, the others leave 0.
  auto losses = torch::zeros({n, t_count}, torch::kDouble);
  const bool was_training = model.is_training();
  model.eval();
  {
    torch::NoGradGuard no_grad;
    for (int64_t i = rank; i < n; i += world_size) {
      std::vector<torch::Tensor> x0, noise, text;
      const LatentShape& shape = clips_->bucket_shape(clips_->bucket(i));  // clips differ by bucket
      for (int64_t j = 0; j < t_count; ++j) {
        auto gen = at::detail::createCPUGenerator(seed_ * 0x9E3779B97F4A7C15ULL +
                                                  static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ULL +
                                                  static_cast<uint64_t>(timesteps_[j]));
        noise.push_back(
            torch::randn({shape.channels, shape.frames, shape.height, shape.width}, gen));
        auto sample = clips_->Draw(i, gen, /*caption_dropout=*/0);
        x0.push_back(sample.latents);
        text.push_back(sample.text);
      }
      auto latents = torch::stack(x0).to(device_);
      auto eps = torch::stack(noise).to(device_);
      auto t = torch::tensor(timesteps_, torch::kLong).to(device_);
      auto noisy = schedule_.AddNoise(latents, eps, t).to(compute_dtype_);
      auto target =
          prediction_ == PredictionType::kVPrediction ? schedule_.Velocity(latents, eps, t) : eps;
      auto pred = model.forward(noisy, t, torch::stack(text).to(device_).to(compute_dtype_));
      auto per_pair = (pred.to(torch::kFloat) - target).pow(2).flatten(1).mean(1);
      losses[i] = per_pair.to(torch::kCPU, torch::kDouble);
    }
  }
  if (was_training) model.train();
  if (comm != nullptr && world_size > 1) {
    auto on_device = losses.to(comm->device());
    comm->AllReduceSumAsync(on_device)->Wait();
    losses = on_device.to(torch::kCPU);
  }
  EvalLoss out;
  const auto per_timestep = losses.mean(0);
  for (int64_t j = 0; j < t_count; ++j) {
    out.by_timestep.emplace_back(timesteps_[j], per_timestep[j].item<double>());
  }
  out.loss = losses.mean().item<double>();
  return out;
}

EvalLoss Evaluator::RunAtStep(UNet3DImpl& model, int64_t step, Ema* ema, Communicator* comm,
                              int rank, int world_size, Reporter& reporter) const {
  std::optional<Ema::Applied> averaged;  // eval.weights: ema
  if (ema != nullptr && weights_ == WeightsSource::kEma) averaged.emplace(ema);
  const auto t0 = std::chrono::steady_clock::now();
  EvalLoss e = Run(model, comm, rank, world_size);
  if (rank == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char what[160];
    std::snprintf(what, sizeof(what), "eval loss %.6f at step %lld (%s weights) in %.2f s", e.loss,
                  static_cast<long long>(step), averaged ? "EMA" : "trained", seconds);
    reporter.OnEvent(EventLevel::kInfo, what);
  }
  return e;
}

}  // namespace adctl

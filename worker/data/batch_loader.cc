#include "worker/data/batch_loader.h"

#include <vector>

namespace adctl {

BatchLoader::BatchLoader(const BatchOptions& options, const LatentDataset& dataset,
                         DistributedSampler& sampler, const NoiseSchedule& schedule)
    : options_(options),
      dataset_(dataset),
      sampler_(sampler),
      schedule_(schedule),
      consumed_(sampler.state()) {}

BatchLoader::~BatchLoader() {
  if (prefetched_.valid()) prefetched_.wait();
}

BatchLoader::HostBatch BatchLoader::DrawHostBatch() {
  const auto indices = sampler_.Next(options_.batch_size);
  std::vector<torch::Tensor> x0, text, noise, steps;
  const int bucket = sampler_.last_bucket();  // the whole batch's shape
  const LatentShape& shape = dataset_.bucket_shape(bucket);
  for (size_t i = 0; i < indices.size(); ++i) {
    // Noise, timestep, the latent draw and caption dropout depend only on the seed and the
    // sample's run-wide position.
    const int64_t position = sampler_.GlobalPosition(static_cast<int64_t>(i));
    auto gen = at::detail::createCPUGenerator(options_.seed * 0x9E3779B97F4A7C15ULL +
                                              static_cast<uint64_t>(position));
    noise.push_back(torch::randn({shape.channels, shape.frames, shape.height, shape.width}, gen));
    steps.push_back(torch::randint(0, schedule_.num_train_timesteps(), {1}, gen, torch::kLong));
    auto sample = dataset_.DrawAt(indices[i], sampler_.last_epoch(), gen, options_.caption_dropout);
    x0.push_back(sample.latents);
    text.push_back(sample.text);
  }
  HostBatch h{torch::stack(x0),   torch::stack(noise), torch::cat(steps),
              torch::stack(text), sampler_.state(),    bucket};
  if (options_.device.is_cuda()) {
    h.latents = h.latents.pin_memory();
    h.noise = h.noise.pin_memory();
    h.text = h.text.pin_memory();
  }
  return h;
}

void BatchLoader::Prefetch() {
  prefetched_ = std::async(std::launch::async, [this] { return DrawHostBatch(); });
}

Batch BatchLoader::Next() {
  if (!prefetched_.valid()) Prefetch();
  HostBatch h = prefetched_.get();
  consumed_ = h.sampler_after;
  Prefetch();
  Batch b;
  b.bucket = h.bucket;
  auto latents = h.latents.to(options_.device, /*non_blocking=*/true);
  auto eps = h.noise.to(options_.device, /*non_blocking=*/true);
  b.timesteps = h.timesteps.to(options_.device);
  b.noisy = schedule_.AddNoise(latents, eps, b.timesteps).to(options_.compute_dtype);
  b.target = options_.prediction_type == PredictionType::kVPrediction
                 ? schedule_.Velocity(latents, eps, b.timesteps)
                 : eps;
  b.text = h.text.to(options_.device, /*non_blocking=*/true).to(options_.compute_dtype);
  return b;
}

}  // namespace adctl

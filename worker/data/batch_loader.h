// The training batch pipeline: each micro-batch's clips, noise and timesteps drawn on a
// background thread (the CPU half) while the device computes the previous one, then moved to
// the device, noised and given its target there.
//
// Everything random about a sample (its noise, timestep, latent draw and caption dropout) comes
// from a generator seeded by (train.seed, the sample's run-wide position in the sampler), so the
// data position is the whole RNG state: N ranks draw exactly what one rank with N× the batch
// draws, and a resumed run continues the same loss curve (worker/data/sampler.h).
//
// Not thread-safe: one caller. The dataset, sampler and schedule must outlive the loader; its
// destructor waits for the batch being drawn.
#pragma once

#include <torch/torch.h>

#include <future>

#include "common/job_spec.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/sampler.h"
#include "worker/diffusion/ddpm.h"

namespace adctl {

// One micro-batch on the device, ready for the UNet.
struct Batch {
  torch::Tensor noisy;      // x_t, compute dtype
  torch::Tensor timesteps;  // [B] int64
  torch::Tensor text;       // text states, compute dtype
  torch::Tensor target;     // ε, or v with v-prediction (fp32)
  int bucket = 0;           // the dataset's shape bucket all its clips are of
};

struct BatchOptions {
  int64_t batch_size = 1;      // clips per micro-batch (train.batch_size)
  uint64_t seed = 0;           // train.seed
  double caption_dropout = 0;  // train.caption_dropout
  PredictionType prediction_type = PredictionType::kEpsilon;  // the schedule's: the target
  torch::Device device{torch::kCPU};
  torch::ScalarType compute_dtype = torch::kFloat;
};

class BatchLoader {
 public:
  // The sampler continues from where it stands (after a resume, the restored state).
  BatchLoader(const BatchOptions& options, const LatentDataset& dataset,
              DistributedSampler& sampler, const NoiseSchedule& schedule);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next micro-batch; starts drawing the one after it.
  Batch Next();

  // The sampler state after the batches Next() returned (not the one being prefetched): what a
  // checkpoint records.
  const DistributedSampler::State& consumed() const { return consumed_; }

 private:
  // The CPU half of a micro-batch, drawn on the prefetch thread: clips, noise, timesteps, and
  // the sampler state right after drawing it (what a checkpoint records once it is consumed).
  struct HostBatch {
    torch::Tensor latents, noise, timesteps, text;
    DistributedSampler::State sampler_after;
    int bucket = 0;
  };

  HostBatch DrawHostBatch();
  // Starts drawing the next micro-batch on a background thread while the device computes.
  void Prefetch();

  const BatchOptions options_;
  const LatentDataset& dataset_;
  DistributedSampler& sampler_;
  const NoiseSchedule& schedule_;
  DistributedSampler::State consumed_;
  std::future<HostBatch> prefetched_;
};

}  // namespace adctl

// Training data for the engine: clips already encoded to latents.
//
// Two on-disk forms. A latent cache written by a preprocess job (worker/data/preprocess.h,
// docs/real-data.md) has an `index.json`, shards under `shards/` holding per-clip latent
// `latent_mean` / `latent_std` [N, 4, F, h, w] and `text_states` [N, L, D] (bf16 or fp16), and
// the empty caption's text state; each draw samples latent = (mean + std·ε) × scaling_factor and
// swaps in the empty caption with probability `caption_dropout`, both from the caller's
// generator (so from the data position); a cache made with `preprocess.flip` also holds
// `latent_mean_flip` / `latent_std_flip`, and each draw first picks one of the two (p = 1/2)
// from that generator. A plain directory of shards holding `latents` and
// `text_states` (F32; `adworker make-synthetic`) is read as is. Shards are mapped, not
// read into memory; a sample is copied out on demand. The synthetic source generates clips
// deterministically from (seed, index): a random latent field that drifts one pixel per frame
// in a per-clip direction (so a motion module has something to learn), and text states that
// encode the direction. `WriteSyntheticShards` writes the same clips as a latent dataset.
// Thread-compatible; Get() is const and may run on several threads.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/safetensors.h"

namespace adctl {

struct LatentSample {
  torch::Tensor latents;  // [C, F, h, w] fp32
  torch::Tensor text;     // [L, D] fp32
};

struct LatentShape {
  int64_t channels = 4, frames = 0, height = 0, width = 0, text_len = 0, text_dim = 0;
  std::string ToString() const;
};

class LatentDataset {
 public:
  virtual ~LatentDataset() = default;
  virtual int64_t size() const = 0;
  virtual const LatentShape& shape() const = 0;
  // The clip's deterministic form (a cache: mean × scaling_factor, its own caption).
  virtual LatentSample Get(int64_t index) const = 0;
  // One training draw: a cache samples the latent and applies caption dropout with `gen`;
  // deterministic sources return Get(index).
  virtual LatentSample Draw(int64_t index, at::Generator& gen, double caption_dropout) const {
    (void)gen;
    (void)caption_dropout;
    return Get(index);
  }
  // Draw as the sampler's epoch `epoch` sees it: a mix of sources (worker/data/sources.h) maps
  // an index to a clip by epoch; other datasets are the same every epoch.
  virtual LatentSample DrawAt(int64_t index, int64_t epoch, at::Generator& gen,
                              double caption_dropout) const {
    (void)epoch;
    return Draw(index, gen, caption_dropout);
  }
  // Whether Draw can swap in an empty caption (the source stores its text state).
  virtual bool has_empty_caption() const { return false; }

  // Shape buckets: the distinct shapes of the clips (one: shape()) and each clip's, the same
  // every epoch. The sampler draws every batch from one bucket (worker/data/sampler.h).
  virtual int buckets() const { return 1; }
  virtual int bucket(int64_t index) const {
    (void)index;
    return 0;
  }
  virtual const LatentShape& bucket_shape(int b) const {
    (void)b;
    return shape();
  }
};

// Each clip's bucket (DistributedSampler's bucketed constructor).
std::vector<int> ClipBuckets(const LatentDataset& dataset);
// "16x64x64": frames × latent height × width, the name of a bucket in metrics and events.
std::string BucketName(const LatentShape& shape);

// Opens `spec.data` (synthetic, or the latents at data.path; a mix of data.sources is opened by
// OpenTrainingData, worker/data/sources.h). `text_dim` is the model's cross-attention width
// (the synthetic source generates it; shards must match it). Errors name `field` (the spec
// field naming the cache), the path and the problem.
Result<std::unique_ptr<LatentDataset>> OpenLatentDataset(const DataSpec& spec, int64_t channels,
                                                         int64_t text_dim,
                                                         const std::string& field = "data.path");

// Writes `spec`'s synthetic clips as shards of at most `shard_size` clips into `dir`.
Status WriteSyntheticShards(const DataSpec& spec, int64_t channels, int64_t text_dim,
                            const std::string& dir, int64_t shard_size);

}  // namespace adctl

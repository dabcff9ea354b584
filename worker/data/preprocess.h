// The preprocess job (`kind: preprocess`): videos + captions → a latent cache
// (worker/data/latent_cache.h) that training reads with `data.kind: latents`.
//
// Each rank takes the shards s ≡ rank (mod world size) of the CSV's rows, decodes their videos on
// `preprocess.decode_threads` threads (AnimateDiff's frame rule, short side resized bilinearly
// with antialiasing, center crop, [−1, 1]) while the previous shard is encoded: the VAE gives
// each clip's latent mean and std (frames in chunks of `preprocess.vae_chunk`), the tokenizer
// and text encoder its caption's last hidden state. Missing, unreadable, truncated, zero-frame
// and too-short videos are skipped and counted per reason. Shards are written atomically, so a
// killed job (any world size) resumes by skipping the shards present; rank 0 writes the empty
// caption's text state first and, once every shard exists, the index. A cache made with other
// settings or other model files is refused. With `preprocess.buckets` each video goes to the
// bucket of the nearest aspect ratio, resized, cropped and windowed to its size and frames, and
// each bucket is a cache of its own inside the output (worker/data/latent_cache.h). The same
// code runs under adctld and as `adworker preprocess`.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/train/trainer.h"

namespace adctl {

// Runs a preprocess job spec; returns the process exit code (common/worker_contract.h).
int RunPreprocess(const TrainerOptions& options);

// uint8 RGB frames [F, H, W, 3] → float [F, 3, h, w] in [−1, 1]: the short side resized to
// cover h × w (bilinear, antialiased, as torchvision's Resize on tensors), then center-cropped.
torch::Tensor PrepareFrames(const torch::Tensor& frames_u8, int64_t height, int64_t width);

// The entry of `buckets` whose aspect ratio (width / height) is nearest a video's, on a log
// scale (so 2:1 and 1:2 are as far from 1:1); ties to the earlier entry. 0 for an empty size.
int NearestAspectBucket(int64_t width, int64_t height,
                        const std::vector<PreprocessBucket>& buckets);

}  // namespace adctl

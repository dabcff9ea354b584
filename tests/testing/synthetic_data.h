// Synthetic latent clips for tests that write caches (WriteSyntheticShards) of given shapes.
#pragma once

#include <cstdint>

#include "common/job_spec.h"

namespace adctl {

// `clips` synthetic clips of `frames` frames at `height` × `width` latents and 4 text tokens,
// generated from `seed`.
inline DataSpec SyntheticClips(int64_t clips, int64_t frames, int64_t height, int64_t width,
                               int64_t seed = 0) {
  DataSpec d;
  d.num_samples = clips;
  d.frames = frames;
  d.height = height;
  d.width = width;
  d.text_len = 4;
  d.seed = seed;
  return d;
}

}  // namespace adctl

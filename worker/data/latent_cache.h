// The latent cache a preprocess job writes and training reads (docs/real-data.md):
//
//   <dir>/index.json                 written last, by rank 0: settings, their hash, the shards,
//                                    clip and skip counts, the VAE scaling factor
//   <dir>/empty_caption.safetensors  `text_state` [L, D]: the empty caption (caption dropout)
//   <dir>/shards/shard-NNNNN.safetensors
//       latent_mean, latent_std [n, C, F, h, w] and text_states [n, L, D] (bf16 or fp16), and
//       with preprocess.flip latent_mean_flip, latent_std_flip (the clips flipped left-right
//       before encoding); metadata: settings_hash, per clip video_ids, captions, windows (the
//       window's number within its video) and frames (its frame indices), as JSON lists, and
//       skipped (JSON list of {video_id, reason, detail}). A shard whose clips were all skipped
//       has no tensors.
//
// Shard k covers CSV rows [k·shard_size, (k+1)·shard_size), windows_per_video clips per row
// that is not skipped; each is written to a temporary name
// and renamed, so a shard file is complete or absent and a killed job resumes by skipping the
// shards present.
//
// A cache of shape buckets (preprocess.buckets) is one cache of the form above a bucket:
//
//   <dir>/index.json                 written last: the settings, the clip and skip totals, and
//                                    "buckets": [{dir, width, height, frames, clips}]
//   <dir>/buckets/FxHxW/             F frames of H × W pixels: index.json, empty_caption and
//                                    shards/shard-NNNNN.safetensors, the same settings hash
//
// Shard k of every bucket covers the same CSV rows: each video's clips are in the shard of the
// bucket its aspect ratio chose, and the rows' skipped videos are recorded in the first bucket's
// shard. A shard is done when every bucket's file of it exists. Each bucket directory is a cache
// of its own (`data.path` may name it). Torch-free; plain value types.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

inline constexpr const char* kCacheIndexFile = "index.json";
inline constexpr const char* kEmptyCaptionFile = "empty_caption.safetensors";
inline constexpr const char* kCacheShardDir = "shards";

struct CacheShardEntry {
  std::string file;  // relative to the cache directory
  int64_t clips = 0;
};

// One bucket of a bucketed cache.
struct CacheBucketEntry {
  std::string dir;  // relative to the cache directory: "buckets/16x256x384"
  int64_t width = 0, height = 0, frames = 0;
  int64_t clips = 0;
};

struct LatentCacheIndex {
  std::string settings_hash;  // sha256 of `settings` (canonical JSON)
  nlohmann::json settings;    // what the cache depends on: sizes, frames, models' hashes, ...
  double scaling_factor = 0.18215;
  std::vector<CacheShardEntry> shards;
  int64_t clips = 0;
  std::map<std::string, int64_t> skipped;  // reason → videos
  int64_t skipped_total = 0;
  std::vector<CacheBucketEntry> buckets;  // a bucketed cache's (its `shards` are then empty)
};

// NotFound when `dir` has no index.json (not a cache, or not finished); other errors name the
// file and the problem.
Result<LatentCacheIndex> ReadLatentCacheIndex(const std::string& dir);
// Writes index.json atomically (temporary file, fsync, rename).
Status WriteLatentCacheIndex(const std::string& dir, const LatentCacheIndex& index);
// "shards/shard-00012.safetensors"
std::string CacheShardName(int64_t shard);
// "buckets/16x256x384": a bucket of `frames` frames of width × height pixels.
std::string CacheBucketDir(int64_t width, int64_t height, int64_t frames);

}  // namespace adctl

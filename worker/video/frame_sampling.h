// AnimateDiff's clip sampling rule (guoyww/AnimateDiff `animatediff/data/dataset.py`, WebVid10M):
//
//   clip_length = min(video_length, (sample_n_frames - 1) * sample_stride + 1)
//   start_idx   = random.randint(0, video_length - clip_length)
//   batch_index = np.linspace(start_idx, start_idx + clip_length - 1, sample_n_frames, dtype=int)
//
// linspace runs in float64 (y[i] = i * step + start, the last element exactly `stop`) and the
// cast truncates toward zero, so a video shorter than the span repeats frames instead of failing.
// Pure functions; thread-safe (the RNG is the caller's).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/status.h"

namespace adctl {

// min(L, (F - 1) * stride + 1). Requires L >= 1, F >= 1, stride >= 1.
int64_t SampleSpan(int64_t video_length, int sample_n_frames, int sample_stride);

// The F frame indices for a clip starting at `start`, which must lie in [0, L - span].
// Errors (InvalidArgument) name the bad argument.
Result<std::vector<int64_t>> SampleFrameIndices(int64_t video_length, int sample_n_frames,
                                                int sample_stride, int64_t start);

// A start drawn uniformly from [0, L - span] with `rng` (unbiased rejection sampling, so the
// same seed gives the same starts on every standard library).
int64_t SampleStart(int64_t video_length, int sample_n_frames, int sample_stride,
                    std::mt19937_64& rng);

// Where the k windows of a video start (preprocess.windows_per_video, window_placement):
//   random:  window w draws its start with SampleStart from an mt19937_64 seeded with
//            seed · 0x9E3779B97F4A7C15 + row + w · 0xD1B54A32D192ED03 (mod 2^64): window 0 is the
//            one-window cache's clip, and each window depends only on (seed, row, w);
//   uniform: evenly spaced over [0, L - span]: start_w = floor(w · (L - span) / (k - 1)), and
//            the middle, floor((L - span) / 2), when k = 1.
// Windows may repeat frames of one another (a short video, or k larger than L - span + 1).
std::vector<int64_t> WindowStarts(int64_t video_length, int sample_n_frames, int sample_stride,
                                  int64_t windows, bool uniform, int64_t seed, int64_t row);

}  // namespace adctl

#include "worker/video/frame_sampling.h"

#include <algorithm>
#include <string>

namespace adctl {

int64_t SampleSpan(int64_t video_length, int sample_n_frames, int sample_stride) {
  return std::min<int64_t>(video_length,
                           static_cast<int64_t>(sample_n_frames - 1) * sample_stride + 1);
}

Result<std::vector<int64_t>> SampleFrameIndices(int64_t video_length, int sample_n_frames,
                                                int sample_stride, int64_t start) {
  if (video_length < 1) {
    return InvalidArgument("frame sampling: video_length must be >= 1, got " +
                           std::to_string(video_length));
  }
  if (sample_n_frames < 1) {
    return InvalidArgument("frame sampling: sample_n_frames must be >= 1, got " +
                           std::to_string(sample_n_frames));
  }
  if (sample_stride < 1) {
    return InvalidArgument("frame sampling: sample_stride must be >= 1, got " +
                           std::to_string(sample_stride));
  }
  int64_t span = SampleSpan(video_length, sample_n_frames, sample_stride);
  if (start < 0 || start > video_length - span) {
    return InvalidArgument("frame sampling: start " + std::to_string(start) + " outside [0, " +
                           std::to_string(video_length - span) + "]");
  }
  // numpy.linspace(start, stop, num): step = (stop - start) / (num - 1); y[i] = i * step + start;
  // y[-1] = stop; then astype(int) truncates.
  const double first = static_cast<double>(start);
  const double stop = static_cast<double>(start + span - 1);
  std::vector<int64_t> indices(sample_n_frames);
  if (sample_n_frames == 1) {
    indices[0] = start;
    return indices;
  }
  const double div = sample_n_frames - 1;
  const double delta = stop - first;
  const double step = delta / div;
  for (int i = 0; i < sample_n_frames; ++i) {
    double y = step == 0 ? (i / div) * delta + first : i * step + first;
    indices[i] = static_cast<int64_t>(y);
  }
  indices.back() = static_cast<int64_t>(stop);
  return indices;
}

int64_t SampleStart(int64_t video_length, int sample_n_frames, int sample_stride,
                    std::mt19937_64& rng) {
  int64_t span = SampleSpan(video_length, sample_n_frames, sample_stride);
  uint64_t range = static_cast<uint64_t>(std::max<int64_t>(0, video_length - span)) + 1;
  // Largest multiple of `range` that fits: draws above it are rejected (no modulo bias).
  uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t draw;
  do {
    draw = rng();
  } while (draw >= limit);
  return static_cast<int64_t>(draw % range);
}

std::vector<int64_t> WindowStarts(int64_t video_length, int sample_n_frames, int sample_stride,
                                  int64_t windows, bool uniform, int64_t seed, int64_t row) {
  std::vector<int64_t> starts;
  const int64_t room =
      std::max<int64_t>(0, video_length - SampleSpan(video_length, sample_n_frames, sample_stride));
  for (int64_t w = 0; w < windows; ++w) {
    if (uniform) {
      starts.push_back(windows == 1 ? room / 2 : w * room / (windows - 1));
      continue;
    }
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL +
                        static_cast<uint64_t>(row) +
                        static_cast<uint64_t>(w) * 0xD1B54A32D192ED03ULL);
    starts.push_back(SampleStart(video_length, sample_n_frames, sample_stride, rng));
  }
  return starts;
}

}  // namespace adctl

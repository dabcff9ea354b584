// Reads video files with FFmpeg's libraries (libavformat/libavcodec/libswscale): the frame count,
// rate and size, and the frames at chosen indices as RGB24 at native size.
//
// Frame count (decord's `len(VideoReader)`): the stream's `nb_frames` from the container header
// when present and plausible (within 10% + 2 frames of duration x frame rate, or no duration to
// compare with); otherwise the video packets are counted by demuxing the whole file (no decoding),
// which is exact for every codec where one packet holds one frame (H.264, MPEG-4, VP9, GIF...).
// `VideoInfo::frames_from_header` says which was used.
//
// ReadFrames decodes sequentially from the first frame (no seeking: exact frame indices for the
// short clips of AnimateDiff datasets, at the cost of decoding the frames before the last index;
// seeking to the keyframe before the first index is a possible speed-up for long videos). YUV
// frames are converted with the matrix and range they are tagged with (BT.601 limited range when
// untagged), as FFmpeg's scale filter does by default (decord converts through it); a frame whose
// size differs from the stream's is scaled to the stream's size. A stream with a display matrix
// of a quarter turn (phones' portrait video) is read upright: `info()` gives the displayed size,
// and ReadFrames turns each frame as a player would (a mirroring matrix is not applied).
// A packet the decoder rejects is skipped, as ffmpeg(1) does; what fails is classified
// (video_error.h): the file ends before the needed frames → kTruncated, nothing decodes →
// kUnreadable.
//
// Thread-safety: a VideoReader is thread-compatible; use one reader per thread. There is no
// global state besides FFmpeg's own (thread-safe since FFmpeg 4). FFmpeg may log to stderr.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/video/rgb_frames.h"
#include "worker/video/video_error.h"

namespace adctl {

struct VideoReaderOptions {
  // FFmpeg decoder threads; 0 lets FFmpeg choose (all cores). Data-loader workers use 1.
  int threads = 1;
  // A video with fewer frames than this fails Open with kTooShort. AnimateDiff's sampling rule
  // never fails on short videos (it repeats frames), so the default only rejects empty ones.
  int64_t min_frames = 1;
};

struct VideoInfo {
  int64_t num_frames = 0;
  double fps = 0;
  int width = 0;  // as displayed: the coded size turned by `rotation`
  int height = 0;
  int rotation = 0;  // clockwise degrees the display matrix turns the coded frames: 0, 90, 180, 270
  std::string codec;                // decoder name, e.g. "h264"
  bool frames_from_header = false;  // num_frames is the container's nb_frames (else counted)
};

class VideoReader {
 public:
  static VideoResult<VideoReader> Open(const std::string& path,
                                       const VideoReaderOptions& options = {});

  VideoReader(VideoReader&&) noexcept;
  VideoReader& operator=(VideoReader&&) noexcept;
  ~VideoReader();

  const VideoInfo& info() const { return info_; }
  const std::string& path() const { return path_; }

  // Frames at `indices` (non-decreasing; repeats allowed, as AnimateDiff's rule gives for short
  // videos), in that order, as [indices.size()][H][W][3]. An index >= num_frames is kTooShort.
  // Unsorted or negative indices are a caller error: InvalidArgument with VideoError::kNone.
  // May be called again; each call decodes from the start.
  VideoResult<RgbFrames> ReadFrames(const std::vector<int64_t>& indices);
  // Every frame (0 .. num_frames - 1).
  VideoResult<RgbFrames> ReadAll();
  // Whether the file holds every frame its container claims, told from the file alone
  // (demuxing, no decoding): fewer video packets than num_frames, a packet cut short
  // (AV_PKT_FLAG_CORRUPT) or a read error before the end is kTruncated (kDataLoss). Returns the
  // packet count. Preprocessing asks before it samples, so whether a damaged file enters a
  // cache does not depend on which frames the seed picks.
  VideoResult<int64_t> CheckComplete();

 private:
  struct Impl;
  VideoReader() = default;
  // Opens demuxer and decoder for `path` (Open, and ReadFrames after a previous pass).
  static VideoResult<std::unique_ptr<Impl>> OpenContexts(const std::string& path, int threads);

  // Constant after Open.
  std::string path_;
  VideoReaderOptions options_;
  VideoInfo info_;
  std::unique_ptr<Impl> impl_;  // FFmpeg contexts
};

}  // namespace adctl

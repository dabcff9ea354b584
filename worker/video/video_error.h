// How a video file failed to load, for the data loader to decide (skip the clip, stop the job,
// report "data missing or corrupt"), plus the result type of video_reader.h.
//
// Every failure carries its class and a Status whose message names the file. Plain value types;
// thread-compatible.
#pragma once

#include <string>
#include <utility>

#include "common/status.h"

namespace adctl {

enum class VideoError {
  kNone = 0,
  kMissing,     // no file at the path (Status kNotFound)
  kUnreadable,  // not a video, no video stream, no decoder, or nothing decodable (kDataLoss)
  kZeroFrames,  // a video stream without frames (kDataLoss)
  kTruncated,   // fewer frames decode than the container claims or the request needs (kDataLoss)
  kTooShort,    // fewer frames than VideoReaderOptions::min_frames, or an index past the end
                // (kFailedPrecondition)
};

// "none", "missing", "unreadable", "zero_frames", "truncated", "too_short".
const char* VideoErrorName(VideoError error);

// A value or a (VideoError, Status) pair.
template <typename T>
class VideoResult {
 public:
  VideoResult(T value) : result_(std::move(value)) {}  // NOLINT: implicit by design
  VideoResult(VideoError error, Status status) : error_(error), result_(std::move(status)) {}

  bool ok() const { return result_.ok(); }
  VideoError error() const { return error_; }
  const Status& status() const { return result_.status(); }
  // "truncated: DATA_LOSS: clip.mp4: ..."
  std::string ToString() const {
    return std::string(VideoErrorName(error_)) + ": " + result_.status().ToString();
  }
  T& value() & { return result_.value(); }
  const T& value() const& { return result_.value(); }
  T value() && { return std::move(result_).value(); }
  T* operator->() { return &result_.value(); }
  const T* operator->() const { return &result_.value(); }
  T& operator*() { return result_.value(); }

 private:
  VideoError error_ = VideoError::kNone;
  Result<T> result_;
};

}  // namespace adctl

#include "worker/video/video_error.h"

namespace adctl {

const char* VideoErrorName(VideoError error) {
  switch (error) {
    case VideoError::kNone:
      return "none";
    case VideoError::kMissing:
      return "missing";
    case VideoError::kUnreadable:
      return "unreadable";
    case VideoError::kZeroFrames:
      return "zero_frames";
    case VideoError::kTruncated:
      return "truncated";
    case VideoError::kTooShort:
      return "too_short";
  }
  return "unknown";
}

}  // namespace adctl

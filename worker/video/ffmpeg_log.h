// FFmpeg's log level, which is process-wide state (libavutil's av_log_set_level).
//
// By default FFmpeg logs at "info": libx264 prints its settings and statistics for every file
// WriteMp4 encodes, and demuxers warn about damaged input that VideoReader already reports as a
// classified error. A program (adworker, media_tests) calls QuietFfmpegLogs once at start-up to
// keep errors only. Thread-safe (an atomic store in FFmpeg).
#pragma once

namespace adctl {

// FFmpeg logs errors only from now on (AV_LOG_ERROR).
void QuietFfmpegLogs();

// Whether this build has FFmpeg's libraries (false: worker/video/without_ffmpeg.cc, where
// every video read or write fails naming what is missing).
bool HaveFfmpeg();

}  // namespace adctl

// FFmpeg's log (libavutil's av_log), which is process-wide state, through spdlog.
//
// By default FFmpeg prints to stderr at "info": libx264 prints its settings and statistics for
// every file WriteMp4 encodes (a third of a training rank's log), and demuxers warn about damaged
// input that VideoReader already reports as a classified error. RouteFfmpegLogs sends every
// FFmpeg message to spdlog's default logger (a rank's own, with its [adworker rR] prefix) at the
// matching level (FfmpegLogLevel), so only warnings and errors reach a log at spdlog's default
// level "info"; FFmpeg's info and verbose lines appear with ADCTL_LOG_LEVEL=debug or trace.
// The first video read or write installs it (VideoReader::Open, WriteMp4, WriteGif); programs
// may call it earlier. Thread-safe (av_log_set_callback is one atomic store; the callback may
// run on FFmpeg's threads, and spdlog's logger is thread-safe).
#pragma once

namespace adctl {

// Installs the callback (idempotent).
void RouteFfmpegLogs();

// The spdlog level (spdlog::level::level_enum) of an FFmpeg level (AV_LOG_*): panic and fatal →
// critical, error → error, warning → warn, info → debug, verbose and below → trace. An FFmpeg
// message is dropped before it is formatted when spdlog would not print it, or when it is above
// av_log_get_level() (av_log_set_level still quiets FFmpeg further).
int FfmpegLogLevel(int av_level);

// RouteFfmpegLogs, kept for the programs that called it before FFmpeg's messages went through
// spdlog (adworker make-videos, media_tests).
void QuietFfmpegLogs();

// Whether this build has FFmpeg's libraries (false: worker/video/without_ffmpeg.cc, where
// every video read or write fails naming what is missing).
bool HaveFfmpeg();

}  // namespace adctl

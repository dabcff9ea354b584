#include "worker/video/ffmpeg_log.h"

#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <string>

extern "C" {
#include <libavutil/log.h>
}

namespace adctl {

namespace {

void ToSpdlog(void* avcl, int av_level, const char* format, va_list args) {
  if (av_level > av_log_get_level()) return;
  const auto level = static_cast<spdlog::level::level_enum>(FfmpegLogLevel(av_level));
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (logger == nullptr || !logger->should_log(level)) return;
  // FFmpeg may send a line in pieces; the prefix ("[libx264 @ 0x…] ") starts each line.
  thread_local int print_prefix = 1;
  char line[1024];
  av_log_format_line2(avcl, av_level, format, args, line, sizeof(line), &print_prefix);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) return;
  logger->log(level, "ffmpeg: {}", text);
}

}  // namespace

int FfmpegLogLevel(int av_level) {
  if (av_level <= AV_LOG_FATAL) return spdlog::level::critical;
  if (av_level <= AV_LOG_ERROR) return spdlog::level::err;
  if (av_level <= AV_LOG_WARNING) return spdlog::level::warn;
  if (av_level <= AV_LOG_INFO) return spdlog::level::debug;
  return spdlog::level::trace;
}

void RouteFfmpegLogs() { av_log_set_callback(ToSpdlog); }

void QuietFfmpegLogs() { RouteFfmpegLogs(); }

bool HaveFfmpeg() { return true; }

}  // namespace adctl

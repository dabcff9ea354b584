// FFmpeg's log through spdlog (worker/video/ffmpeg_log.h): a rank's log gets FFmpeg's warnings
// and errors, not its info lines (libx264's settings and statistics for every file encoded).
#include "worker/video/ffmpeg_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "tests/testing/temp_dir.h"
#include "worker/video/video_writer.h"

extern "C" {
#include <libavutil/log.h>
}

namespace adctl {
namespace {

// For its lifetime: spdlog's default logger (what a rank logs through) writes to `lines` at
// spdlog's default level (info), FFmpeg's own level is `av_level` (media_tests keeps it at
// fatal otherwise), and what the process writes to stderr goes to `stderr_path`.
class CapturedLogs {
 public:
  CapturedLogs(std::ostringstream* lines, int av_level, const std::string& stderr_path)
      : previous_logger_(spdlog::default_logger()), previous_av_level_(av_log_get_level()) {
    auto logger = std::make_shared<spdlog::logger>(
        "rank", std::make_shared<spdlog::sinks::ostream_sink_mt>(*lines));
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
    av_log_set_level(av_level);
    fflush(stderr);
    saved_stderr_ = dup(STDERR_FILENO);
    const int file = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(file, STDERR_FILENO);
    close(file);
  }
  ~CapturedLogs() {
    fflush(stderr);
    dup2(saved_stderr_, STDERR_FILENO);
    close(saved_stderr_);
    av_log_set_level(previous_av_level_);
    spdlog::set_default_logger(previous_logger_);
  }

 private:
  std::shared_ptr<spdlog::logger> previous_logger_;
  int previous_av_level_;
  int saved_stderr_ = -1;
};

std::string ReadAll(const std::string& path) {
  std::string out;
  if (FILE* f = fopen(path.c_str(), "rb")) {
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof(buffer), f)) > 0;) out.append(buffer, n);
    fclose(f);
  }
  return out;
}

TEST(FfmpegLogTest, WarningsReachTheLoggerInfoDoesNot) {
  TempDir dir;
  const std::string stderr_path = dir.path() + "/stderr";
  std::ostringstream lines;
  {
    CapturedLogs captured(&lines, AV_LOG_INFO, stderr_path);
    RouteFfmpegLogs();
    av_log(nullptr, AV_LOG_INFO, "an info line of FFmpeg\n");
    av_log(nullptr, AV_LOG_VERBOSE, "a verbose line of FFmpeg\n");
    av_log(nullptr, AV_LOG_WARNING, "a warning of FFmpeg\n");
    av_log(nullptr, AV_LOG_ERROR, "an error of FFmpeg: %d\n", 42);
  }
  const std::string logged = lines.str();
  EXPECT_NE(logged.find("warning ffmpeg: a warning of FFmpeg\n"), std::string::npos) << logged;
  EXPECT_NE(logged.find("error ffmpeg: an error of FFmpeg: 42\n"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("info line"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("verbose line"), std::string::npos) << logged;
  // Nothing of FFmpeg's goes around the logger.
  EXPECT_EQ(ReadAll(stderr_path), "");
  // Levels below warning are spdlog's debug and trace (ADCTL_LOG_LEVEL=debug shows them).
  EXPECT_EQ(FfmpegLogLevel(AV_LOG_FATAL), spdlog::level::critical);
  EXPECT_EQ(FfmpegLogLevel(AV_LOG_ERROR), spdlog::level::err);
  EXPECT_EQ(FfmpegLogLevel(AV_LOG_WARNING), spdlog::level::warn);
  EXPECT_EQ(FfmpegLogLevel(AV_LOG_INFO), spdlog::level::debug);
  EXPECT_EQ(FfmpegLogLevel(AV_LOG_DEBUG), spdlog::level::trace);
}

// A real encode with FFmpeg at its default level (info): libx264's settings and statistics
// appear neither in the logger's lines nor on stderr (which a rank's log is).
TEST(FfmpegLogTest, EncodingAnMp4LeavesNoInfoLinesInTheLog) {
  TempDir dir;
  const std::string stderr_path = dir.path() + "/stderr";
  RgbFrames clip(8, 32, 32);
  for (size_t i = 0; i < clip.data.size(); ++i) clip.data[i] = static_cast<uint8_t>(i * 7);
  std::ostringstream lines;
  Status written;
  {
    CapturedLogs captured(&lines, AV_LOG_INFO, stderr_path);
    written = WriteMp4(dir.path() + "/clip.mp4", clip, 8);
  }
  ASSERT_TRUE(written.ok()) << written.ToString();
  const std::string around = ReadAll(stderr_path);
  EXPECT_EQ(around.find("x264"), std::string::npos) << around;
  EXPECT_EQ(lines.str().find("x264"), std::string::npos) << lines.str();
  if (DefaultMp4Encoder() != "libx264") GTEST_SKIP() << "no libx264 here: encoded as MPEG-4";
}

}  // namespace
}  // namespace adctl

// adctl_video built without FFmpeg's libraries (a GPU build whose carried packages lack them:
// scripts/gpu-build). Everything that reads or writes a video file fails with one message
// naming what is missing; frame sampling, the dataset CSV, grids and the synthetic-clip planner
// (the FFmpeg-free parts) are the same code as in the full build.
#include <memory>

#include "worker/video/ffmpeg_log.h"
#include "worker/video/make_videos.h"
#include "worker/video/video_reader.h"
#include "worker/video/video_writer.h"

namespace adctl {

namespace {

Status NoFfmpeg(const std::string& path) {
  return FailedPrecondition(path +
                            ": this adworker was built without FFmpeg (libavformat, libavcodec, "
                            "libswscale), so it cannot read or write video files");
}

}  // namespace

struct VideoReader::Impl {};

VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;
VideoReader::~VideoReader() = default;

VideoResult<VideoReader> VideoReader::Open(const std::string& path, const VideoReaderOptions&) {
  return {VideoError::kUnreadable, NoFfmpeg(path)};
}

VideoResult<RgbFrames> VideoReader::ReadFrames(const std::vector<int64_t>&) {
  return {VideoError::kUnreadable, NoFfmpeg(path_)};
}

VideoResult<RgbFrames> VideoReader::ReadAll() { return {VideoError::kUnreadable, NoFfmpeg(path_)}; }
VideoResult<int64_t> VideoReader::CheckComplete() {
  return {VideoError::kUnreadable, NoFfmpeg(path_)};
}

std::string DefaultMp4Encoder() { return ""; }

Status WriteMp4(const std::string& path, const RgbFrames&, double, const Mp4Options&) {
  return NoFfmpeg(path);
}

Status WriteGif(const std::string& path, const RgbFrames&, double) { return NoFfmpeg(path); }

void RouteFfmpegLogs() {}

int FfmpegLogLevel(int) { return 0; }

void QuietFfmpegLogs() {}

bool HaveFfmpeg() { return false; }

}  // namespace adctl

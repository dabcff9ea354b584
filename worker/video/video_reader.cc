#include "worker/video/video_reader.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>

#include "worker/video/ffmpeg_log.h"
#include "worker/video/ffmpeg_util.h"

extern "C" {
#include <libavutil/display.h>
}

namespace adctl {

namespace {

template <typename T>
VideoResult<T> Fail(VideoError error, const std::string& message) {
  switch (error) {
    case VideoError::kMissing:
      return {error, NotFound(message)};
    case VideoError::kTooShort:
      return {error, FailedPrecondition(message)};
    default:
      return {error, DataLoss(message)};
  }
}

// The clockwise quarter turns a player applies to the stream's frames (its display matrix), in
// degrees: 0, 90, 180 or 270.
int DisplayRotation(const AVStream* stream) {
  size_t size = 0;
  const uint8_t* matrix = av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (matrix == nullptr || size < 9 * sizeof(int32_t)) return 0;
  const double counter_clockwise =
      av_display_rotation_get(reinterpret_cast<const int32_t*>(matrix));
  if (!std::isfinite(counter_clockwise)) return 0;
  const long quarter_turns = std::lround(-counter_clockwise / 90.0);
  return static_cast<int>(((quarter_turns % 4) + 4) % 4) * 90;
}

// `src`, an RGB24 image of h × w, turned clockwise by `degrees` (90, 180, 270) into `dst`
// (w × h for a quarter turn).
void RotateRgb(const uint8_t* src, int h, int w, int degrees, uint8_t* dst) {
  const int dst_w = degrees == 180 ? w : h;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      int dy = h - 1 - y, dx = w - 1 - x;  // 180
      if (degrees == 90) {
        dy = x;
        dx = h - 1 - y;
      } else if (degrees == 270) {
        dy = w - 1 - x;
        dx = y;
      }
      std::memcpy(dst + (static_cast<size_t>(dy) * dst_w + dx) * 3,
                  src + (static_cast<size_t>(y) * w + x) * 3, 3);
    }
  }
}

}  // namespace

// The FFmpeg side of a reader: demuxer, decoder, scaler. Reopened for each pass over the file.
struct VideoReader::Impl {
  ffmpeg::InputPtr format;
  ffmpeg::CodecPtr codec;
  ffmpeg::SwsPtr sws;
  int stream_index = -1;
  bool fresh = false;  // nothing read since the contexts were opened
};

namespace {

// YUV -> RGB with the matrix and range the frame is tagged with (BT.601 when untagged), like
// FFmpeg's scale filter with its default in_color_matrix=auto, which decord's conversion uses.
void UseFrameColourMatrix(SwsContext* sws, const AVFrame* frame) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(frame->format));
  if (desc == nullptr || (desc->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL)) ||
      desc->nb_components < 3) {
    return;  // not YUV: no matrix
  }
  int colorspace = SWS_CS_DEFAULT;
  switch (frame->colorspace) {
    case AVCOL_SPC_BT709:
    case AVCOL_SPC_FCC:
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M:
    case AVCOL_SPC_SMPTE240M:
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL:
      colorspace = frame->colorspace;  // SWS_CS_* share these values
      break;
    default:
      break;
  }
  const std::string name = desc->name;
  const bool full_range = frame->color_range == AVCOL_RANGE_JPEG || name.rfind("yuvj", 0) == 0;
  sws_setColorspaceDetails(sws, sws_getCoefficients(colorspace), full_range ? 1 : 0,
                           sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
}

}  // namespace

VideoResult<std::unique_ptr<VideoReader::Impl>> VideoReader::OpenContexts(const std::string& path,
                                                                          int threads) {
  using ImplPtr = std::unique_ptr<VideoReader::Impl>;
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return Fail<ImplPtr>(VideoError::kMissing, path + ": no such file");
  if (S_ISDIR(st.st_mode)) return Fail<ImplPtr>(VideoError::kUnreadable, path + ": is a directory");

  RouteFfmpegLogs();
  auto impl = std::make_unique<VideoReader::Impl>();
  AVFormatContext* format = nullptr;
  int rc = avformat_open_input(&format, path.c_str(), nullptr, nullptr);
  if (rc < 0) {
    return Fail<ImplPtr>(VideoError::kUnreadable,
                         path + ": not a video file FFmpeg can open: " + ffmpeg::ErrorText(rc));
  }
  impl->format.reset(format);
  rc = avformat_find_stream_info(format, nullptr);
  if (rc < 0) {
    return Fail<ImplPtr>(VideoError::kUnreadable,
                         path + ": cannot read stream information: " + ffmpeg::ErrorText(rc));
  }
  const AVCodec* decoder = nullptr;
  rc = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  if (rc == AVERROR_STREAM_NOT_FOUND) {
    return Fail<ImplPtr>(VideoError::kUnreadable, path + ": no video stream");
  }
  if (rc < 0 || decoder == nullptr) {
    return Fail<ImplPtr>(VideoError::kUnreadable, path + ": no decoder for its video stream");
  }
  impl->stream_index = rc;
  AVStream* stream = format->streams[rc];
  impl->codec.reset(avcodec_alloc_context3(decoder));
  if (!impl->codec) return Fail<ImplPtr>(VideoError::kUnreadable, path + ": out of memory");
  rc = avcodec_parameters_to_context(impl->codec.get(), stream->codecpar);
  if (rc >= 0) {
    impl->codec->thread_count = threads;
    rc = avcodec_open2(impl->codec.get(), decoder, nullptr);
  }
  if (rc < 0) {
    return Fail<ImplPtr>(VideoError::kUnreadable, path + ": cannot open the " + decoder->name +
                                                      " decoder: " + ffmpeg::ErrorText(rc));
  }
  if (impl->codec->width <= 0 || impl->codec->height <= 0) {
    return Fail<ImplPtr>(VideoError::kUnreadable, path + ": video stream has no frame size");
  }
  impl->fresh = true;
  return impl;
}

VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;
VideoReader::~VideoReader() = default;

VideoResult<VideoReader> VideoReader::Open(const std::string& path,
                                           const VideoReaderOptions& options) {
  auto opened = OpenContexts(path, options.threads);
  if (!opened.ok()) return {opened.error(), opened.status()};
  VideoReader reader;
  reader.path_ = path;
  reader.options_ = options;
  reader.impl_ = std::move(*opened);
  Impl& impl = *reader.impl_;
  AVStream* stream = impl.format->streams[impl.stream_index];

  VideoInfo& info = reader.info_;
  info.rotation = DisplayRotation(stream);
  const bool quarter_turn = info.rotation == 90 || info.rotation == 270;
  info.width = quarter_turn ? impl.codec->height : impl.codec->width;
  info.height = quarter_turn ? impl.codec->width : impl.codec->height;
  info.codec = impl.codec->codec->name;
  AVRational rate = av_guess_frame_rate(impl.format.get(), stream, nullptr);
  info.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;

  double duration_s = 0;
  if (stream->duration != AV_NOPTS_VALUE && stream->duration > 0) {
    duration_s = stream->duration * av_q2d(stream->time_base);
  } else if (impl.format->duration != AV_NOPTS_VALUE && impl.format->duration > 0) {
    duration_s = impl.format->duration / static_cast<double>(AV_TIME_BASE);
  }
  double estimate = duration_s * info.fps;
  bool plausible = stream->nb_frames > 0 &&
                   (estimate <= 0 || std::fabs(stream->nb_frames - estimate) <= 0.1 * estimate + 2);
  if (plausible) {
    info.num_frames = stream->nb_frames;
    info.frames_from_header = true;
  } else {
    // Count the stream's packets (demuxing only); a read error ends the count.
    ffmpeg::PacketPtr packet(av_packet_alloc());
    int64_t count = 0;
    while (av_read_frame(impl.format.get(), packet.get()) >= 0) {
      if (packet->stream_index == impl.stream_index) ++count;
      av_packet_unref(packet.get());
    }
    impl.fresh = false;
    info.num_frames = count;
  }
  if (info.num_frames == 0) {
    return Fail<VideoReader>(VideoError::kZeroFrames, path + ": the video stream has no frames");
  }
  if (info.num_frames < options.min_frames) {
    return Fail<VideoReader>(VideoError::kTooShort, path + ": " + std::to_string(info.num_frames) +
                                                        " frames, fewer than the minimum of " +
                                                        std::to_string(options.min_frames));
  }
  return reader;
}

VideoResult<int64_t> VideoReader::CheckComplete() {
  if (!impl_->fresh) {
    auto reopened = OpenContexts(path_, options_.threads);
    if (!reopened.ok()) return {reopened.error(), reopened.status()};
    impl_ = std::move(*reopened);
  }
  impl_->fresh = false;
  ffmpeg::PacketPtr packet(av_packet_alloc());
  int64_t packets = 0, corrupt = 0;
  std::string read_error;
  while (true) {
    const int rc = av_read_frame(impl_->format.get(), packet.get());
    if (rc < 0) {
      if (rc != AVERROR_EOF) read_error = ffmpeg::ErrorText(rc);
      break;
    }
    if (packet->stream_index == impl_->stream_index) {
      ++packets;
      if (packet->flags & AV_PKT_FLAG_CORRUPT) ++corrupt;
    }
    av_packet_unref(packet.get());
  }
  if (packets < info_.num_frames || corrupt > 0 || !read_error.empty()) {
    return Fail<int64_t>(VideoError::kTruncated,
                         path_ + ": the container claims " + std::to_string(info_.num_frames) +
                             " frames, the file holds " + std::to_string(packets) +
                             (corrupt > 0 ? " (" + std::to_string(corrupt) + " cut short)" : "") +
                             (read_error.empty() ? "" : "; read error: " + read_error));
  }
  return packets;
}

VideoResult<RgbFrames> VideoReader::ReadAll() {
  std::vector<int64_t> all(info_.num_frames);
  for (int64_t i = 0; i < info_.num_frames; ++i) all[i] = i;
  return ReadFrames(all);
}

VideoResult<RgbFrames> VideoReader::ReadFrames(const std::vector<int64_t>& indices) {
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || (i > 0 && indices[i] < indices[i - 1])) {
      return {VideoError::kNone, InvalidArgument(path_ + ": frame indices must be >= 0 and "
                                                         "non-decreasing")};
    }
  }
  const int H = info_.height, W = info_.width;
  RgbFrames out(static_cast<int>(indices.size()), H, W);
  // A turned stream is converted at its coded size into `coded`, then turned into place.
  const bool quarter_turn = info_.rotation == 90 || info_.rotation == 270;
  const int coded_h = quarter_turn ? W : H, coded_w = quarter_turn ? H : W;
  std::vector<uint8_t> coded(info_.rotation != 0 ? RgbFrames::FrameBytes(coded_h, coded_w) : 0);
  if (indices.empty()) return out;
  if (indices.back() >= info_.num_frames) {
    return Fail<RgbFrames>(VideoError::kTooShort, path_ + ": frame " +
                                                      std::to_string(indices.back()) +
                                                      " requested, the video has " +
                                                      std::to_string(info_.num_frames) + " frames");
  }
  if (!impl_->fresh) {
    auto reopened = OpenContexts(path_, options_.threads);
    if (!reopened.ok()) return {reopened.error(), reopened.status()};
    impl_ = std::move(*reopened);
  }
  Impl& impl = *impl_;
  impl.fresh = false;

  ffmpeg::PacketPtr packet(av_packet_alloc());
  ffmpeg::FramePtr frame(av_frame_alloc());
  if (!packet || !frame) return Fail<RgbFrames>(VideoError::kUnreadable, path_ + ": out of memory");
  size_t next = 0;        // next entry of `indices` to fill
  int64_t decoded = 0;    // frames the decoder has produced so far
  int decode_errors = 0;  // packets the decoder rejected
  std::string last_error;
  std::string convert_error;

  // Takes every frame the decoder has ready; false once all indices are filled or on error.
  auto drain = [&]() -> bool {
    while (true) {
      int rc = avcodec_receive_frame(impl.codec.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return true;
      if (rc < 0) {
        ++decode_errors;
        last_error = ffmpeg::ErrorText(rc);
        return true;
      }
      bool converted = false;
      while (next < indices.size() && indices[next] == decoded) {
        if (converted) {
          std::memcpy(out.frame(next), out.frame(next - 1), out.frame_bytes());
        } else {
          impl.sws.reset(sws_getCachedContext(impl.sws.release(), frame->width, frame->height,
                                              static_cast<AVPixelFormat>(frame->format), coded_w,
                                              coded_h, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr,
                                              nullptr, nullptr));
          if (impl.sws) UseFrameColourMatrix(impl.sws.get(), frame.get());
          uint8_t* dst[4] = {coded.empty() ? out.frame(next) : coded.data(), nullptr, nullptr,
                             nullptr};
          int dst_stride[4] = {coded_w * 3, 0, 0, 0};
          if (!impl.sws || sws_scale(impl.sws.get(), frame->data, frame->linesize, 0, frame->height,
                                     dst, dst_stride) <= 0) {
            convert_error = "cannot convert frame " + std::to_string(decoded) + " (" +
                            ffmpeg::PixelFormatName(frame->format) + ") to RGB";
            av_frame_unref(frame.get());
            return false;
          }
          if (!coded.empty()) {
            RotateRgb(coded.data(), coded_h, coded_w, info_.rotation, out.frame(next));
          }
          converted = true;
        }
        ++next;
      }
      av_frame_unref(frame.get());
      ++decoded;
      if (next == indices.size()) return false;
    }
  };

  std::string read_error;
  int64_t packets = 0;  // of the video stream
  int64_t corrupt_packets = 0;
  bool more = true;
  while (more) {
    int rc = av_read_frame(impl.format.get(), packet.get());
    if (rc < 0) {
      if (rc != AVERROR_EOF) read_error = ffmpeg::ErrorText(rc);
      break;
    }
    if (packet->stream_index == impl.stream_index) {
      ++packets;
      if (packet->flags & AV_PKT_FLAG_CORRUPT) ++corrupt_packets;
      int sent = avcodec_send_packet(impl.codec.get(), packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) {
        ++decode_errors;
        last_error = ffmpeg::ErrorText(sent);
      }
      more = drain();
    }
    av_packet_unref(packet.get());
  }
  if (more) {  // end of input: flush the frames the decoder still holds
    avcodec_send_packet(impl.codec.get(), nullptr);
    drain();
  }
  if (!convert_error.empty()) {
    return Fail<RgbFrames>(VideoError::kUnreadable, path_ + ": " + convert_error);
  }
  if (next == indices.size()) return out;
  // The data ends before the container's index does when the demuxer stopped on an error, cut a
  // packet short (AV_PKT_FLAG_CORRUPT, "partial file") or ran out of packets early: truncated.
  // Otherwise a stream of which nothing decodes is unreadable.
  const bool ended_early = !read_error.empty() || corrupt_packets > 0 || packets < info_.num_frames;
  if (!ended_early && decoded == 0 && decode_errors > 0) {
    return Fail<RgbFrames>(VideoError::kUnreadable,
                           path_ + ": no frame decodes (" + std::to_string(decode_errors) +
                               " decoder errors, last: " + last_error + ")");
  }
  std::string why = read_error.empty() ? "" : "; read error: " + read_error;
  if (decode_errors > 0) {
    why += "; " + std::to_string(decode_errors) + " decoder errors, last: " + last_error;
  }
  return Fail<RgbFrames>(VideoError::kTruncated, path_ + ": only " + std::to_string(decoded) +
                                                     " of the " + std::to_string(info_.num_frames) +
                                                     " frames the container claims decode; frame " +
                                                     std::to_string(indices[next]) + " was needed" +
                                                     why);
}

}  // namespace adctl

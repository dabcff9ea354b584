#include "worker/video/video_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>

#include "worker/video/ffmpeg_log.h"
#include "worker/video/ffmpeg_util.h"

extern "C" {
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
}

namespace adctl {
namespace {

// Fills `frame` (already allocated in the encoder's format) from RGB frame `f`.
using FillFrame = std::function<Status(int f, AVFrame* frame)>;

struct EncoderSetup {
  const char* muxer;  // "mp4", "gif"
  const AVCodec* codec;
  AVPixelFormat pix_fmt;
  AVRational encoder_time_base;
  std::function<void(AVCodecContext*)> configure;  // codec options
  AVDictionary* muxer_options = nullptr;           // owned; freed by Encode
  int rotation = 0;                                // display matrix: clockwise degrees
};

Status CheckClip(const std::string& path, const RgbFrames& frames, double fps) {
  if (frames.num_frames < 1 || frames.height < 1 || frames.width < 1) {
    return InvalidArgument(path + ": empty clip (" + std::to_string(frames.num_frames) +
                           " frames of " + std::to_string(frames.width) + "x" +
                           std::to_string(frames.height) + ")");
  }
  if (frames.data.size() != frames.frame_bytes() * frames.num_frames) {
    return InvalidArgument(
        path + ": clip data holds " + std::to_string(frames.data.size()) +
        " bytes, want F*H*W*3 = " + std::to_string(frames.frame_bytes() * frames.num_frames));
  }
  if (!(fps > 0) || fps > 1000) {
    return InvalidArgument(path + ": fps must be in (0, 1000], got " + std::to_string(fps));
  }
  return Status::Ok();
}

Status Encode(const std::string& path, const RgbFrames& frames, EncoderSetup setup,
              const FillFrame& fill) {
  std::unique_ptr<AVDictionary*, void (*)(AVDictionary**)> muxer_options(&setup.muxer_options,
                                                                         av_dict_free);
  auto fail = [&](const std::string& what, int rc) {
    return Internal(path + ": " + what + ": " + ffmpeg::ErrorText(rc));
  };
  RouteFfmpegLogs();
  AVFormatContext* raw = nullptr;
  int rc = avformat_alloc_output_context2(&raw, nullptr, setup.muxer, path.c_str());
  if (rc < 0 || raw == nullptr) return fail(std::string("no ") + setup.muxer + " muxer", rc);
  ffmpeg::OutputPtr output(raw);

  ffmpeg::CodecPtr encoder(avcodec_alloc_context3(setup.codec));
  if (!encoder) return Internal(path + ": out of memory");
  encoder->width = frames.width;
  encoder->height = frames.height;
  encoder->pix_fmt = setup.pix_fmt;
  encoder->time_base = setup.encoder_time_base;
  encoder->framerate = av_inv_q(setup.encoder_time_base);
  if (output->oformat->flags & AVFMT_GLOBALHEADER) encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (setup.configure) setup.configure(encoder.get());
  rc = avcodec_open2(encoder.get(), setup.codec, nullptr);
  if (rc < 0) return fail(std::string("cannot open the ") + setup.codec->name + " encoder", rc);

  AVStream* stream = avformat_new_stream(output.get(), nullptr);
  if (stream == nullptr) return Internal(path + ": cannot add a stream");
  rc = avcodec_parameters_from_context(stream->codecpar, encoder.get());
  if (rc < 0) return fail("codec parameters", rc);
  stream->time_base = encoder->time_base;
  stream->avg_frame_rate = encoder->framerate;
  if (setup.rotation != 0) {
    uint8_t* matrix =
        av_stream_new_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t));
    if (matrix == nullptr) return Internal(path + ": out of memory");
    // Set takes the clockwise angle (av_display_rotation_get gives it back counter-clockwise).
    av_display_rotation_set(reinterpret_cast<int32_t*>(matrix), setup.rotation);
  }

  rc = avio_open(&output->pb, path.c_str(), AVIO_FLAG_WRITE);
  if (rc < 0) return fail("cannot create the file", rc);
  rc = avformat_write_header(output.get(), &setup.muxer_options);
  if (rc < 0) return fail("cannot write the header", rc);

  ffmpeg::FramePtr frame(av_frame_alloc());
  ffmpeg::PacketPtr packet(av_packet_alloc());
  if (!frame || !packet) return Internal(path + ": out of memory");
  frame->format = setup.pix_fmt;
  frame->width = frames.width;
  frame->height = frames.height;

  auto write_packets = [&]() -> Status {
    while (true) {
      int got = avcodec_receive_packet(encoder.get(), packet.get());
      if (got == AVERROR(EAGAIN) || got == AVERROR_EOF) return Status::Ok();
      if (got < 0) return fail("encoding", got);
      av_packet_rescale_ts(packet.get(), encoder->time_base, stream->time_base);
      packet->stream_index = stream->index;
      int written = av_interleaved_write_frame(output.get(), packet.get());
      if (written < 0) return fail("writing a packet", written);
    }
  };
  for (int f = 0; f < frames.num_frames; ++f) {
    // A fresh buffer per frame: the encoder may still hold a reference to the previous one.
    av_frame_unref(frame.get());
    frame->format = setup.pix_fmt;
    frame->width = frames.width;
    frame->height = frames.height;
    rc = av_frame_get_buffer(frame.get(), 0);
    if (rc < 0) return fail("frame buffer", rc);
    ADCTL_RETURN_IF_ERROR(fill(f, frame.get()));
    frame->pts = f;
    rc = avcodec_send_frame(encoder.get(), frame.get());
    if (rc < 0) return fail("encoding frame " + std::to_string(f), rc);
    ADCTL_RETURN_IF_ERROR(write_packets());
  }
  rc = avcodec_send_frame(encoder.get(), nullptr);
  if (rc < 0) return fail("flushing the encoder", rc);
  ADCTL_RETURN_IF_ERROR(write_packets());
  rc = av_write_trailer(output.get());
  if (rc < 0) return fail("cannot write the trailer", rc);
  rc = avio_closep(&output->pb);
  if (rc < 0) return fail("closing the file", rc);
  return Status::Ok();
}

// A palette of at most 256 colours for one frame, by median cut (Heckbert 1982) over the 15-bit
// colour histogram: the box with the most pixels x longest side is split at its pixel median
// along that side; each entry is the mean of its box's pixels. `nearest` maps every 15-bit colour
// of the frame to its closest entry.
struct Palette {
  std::array<uint32_t, 256> argb{};
  std::vector<uint8_t> nearest;  // 32768 entries
};

int Key15(const uint8_t* p) { return ((p[0] >> 3) << 10) | ((p[1] >> 3) << 5) | (p[2] >> 3); }
int Channel15(int key, int c) { return (key >> (10 - 5 * c)) & 31; }

Palette BuildPalette(const RgbFrames& frames, int f) {
  struct Bucket {
    int key;
    int64_t count;
    std::array<int64_t, 3> sum;
  };
  std::vector<Bucket> all(32768);
  for (int k = 0; k < 32768; ++k) all[k] = {k, 0, {0, 0, 0}};
  const size_t pixels = static_cast<size_t>(frames.height) * frames.width;
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = frames.frame(f) + i * 3;
    Bucket& bucket = all[Key15(p)];
    ++bucket.count;
    for (int c = 0; c < 3; ++c) bucket.sum[c] += p[c];
  }
  std::vector<Bucket> buckets;
  for (const Bucket& b : all) {
    if (b.count > 0) buckets.push_back(b);
  }
  struct Box {
    size_t begin, end;  // range of `buckets`
    int64_t count;
    int longest_channel, extent;
  };
  auto make_box = [&](size_t begin, size_t end) {
    Box box{begin, end, 0, 0, 0};
    std::array<int, 3> lo{31, 31, 31}, hi{0, 0, 0};
    for (size_t i = begin; i < end; ++i) {
      box.count += buckets[i].count;
      for (int c = 0; c < 3; ++c) {
        lo[c] = std::min(lo[c], Channel15(buckets[i].key, c));
        hi[c] = std::max(hi[c], Channel15(buckets[i].key, c));
      }
    }
    for (int c = 0; c < 3; ++c) {
      if (hi[c] - lo[c] > box.extent) box.extent = hi[c] - lo[c], box.longest_channel = c;
    }
    return box;
  };
  std::vector<Box> boxes = {make_box(0, buckets.size())};
  while (boxes.size() < 256) {
    int best = -1;
    int64_t best_score = 0;
    for (size_t i = 0; i < boxes.size(); ++i) {
      int64_t score = boxes[i].count * boxes[i].extent;
      if (boxes[i].end - boxes[i].begin > 1 && score > best_score) {
        best = static_cast<int>(i);
        best_score = score;
      }
    }
    if (best < 0) break;  // every box is one 15-bit colour
    Box box = boxes[best];
    int c = box.longest_channel;
    std::stable_sort(buckets.begin() + box.begin, buckets.begin() + box.end,
                     [c](const Bucket& a, const Bucket& b) {
                       return Channel15(a.key, c) < Channel15(b.key, c);
                     });
    size_t split = box.begin + 1;
    int64_t below = buckets[box.begin].count;
    while (split < box.end - 1 && below * 2 < box.count) below += buckets[split++].count;
    boxes[best] = make_box(box.begin, split);
    boxes.push_back(make_box(split, box.end));
  }
  Palette palette;
  std::vector<std::array<int, 3>> colours;
  for (const Box& box : boxes) {
    std::array<int64_t, 3> sum{0, 0, 0};
    for (size_t i = box.begin; i < box.end; ++i) {
      for (int c = 0; c < 3; ++c) sum[c] += buckets[i].sum[c];
    }
    std::array<int, 3> colour{0, 0, 0};
    for (int c = 0; c < 3 && box.count > 0; ++c) colour[c] = static_cast<int>(sum[c] / box.count);
    palette.argb[colours.size()] =
        0xFF000000u | (colour[0] << 16) | (colour[1] << 8) | static_cast<uint32_t>(colour[2]);
    colours.push_back(colour);
  }
  palette.nearest.assign(32768, 0);
  for (int k = 0; k < 32768; ++k) {
    if (all[k].count == 0) continue;  // not in this frame
    int r = Channel15(k, 0) * 8 + 4, g = Channel15(k, 1) * 8 + 4, b = Channel15(k, 2) * 8 + 4;
    int best = 0, best_d = INT32_MAX;
    for (size_t i = 0; i < colours.size(); ++i) {
      int dr = r - colours[i][0], dg = g - colours[i][1], db = b - colours[i][2];
      int d = dr * dr + dg * dg + db * db;
      if (d < best_d) {
        best_d = d;
        best = static_cast<int>(i);
      }
    }
    palette.nearest[k] = static_cast<uint8_t>(best);
  }
  return palette;
}

}  // namespace

std::string DefaultMp4Encoder() {
  return avcodec_find_encoder_by_name("libx264") != nullptr ? "libx264" : "mpeg4";
}

Status WriteMp4(const std::string& path, const RgbFrames& frames, double fps,
                const Mp4Options& options) {
  ADCTL_RETURN_IF_ERROR(CheckClip(path, frames, fps));
  if (frames.width % 2 != 0 || frames.height % 2 != 0) {
    return InvalidArgument(path + ": MP4 (yuv420p) needs even width and height, got " +
                           std::to_string(frames.width) + "x" + std::to_string(frames.height));
  }
  if (options.rotation != 0 && options.rotation != 90 && options.rotation != 180 &&
      options.rotation != 270) {
    return InvalidArgument(path + ": rotation must be 0, 90, 180 or 270 degrees, got " +
                           std::to_string(options.rotation));
  }
  bool h264 = options.codec == Mp4Codec::kH264 ||
              (options.codec == Mp4Codec::kAuto && DefaultMp4Encoder() == "libx264");
  const AVCodec* codec =
      h264 ? avcodec_find_encoder_by_name("libx264") : avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  if (codec == nullptr) {
    return FailedPrecondition(path + ": this libavcodec has no " + (h264 ? "libx264" : "mpeg4") +
                              " encoder");
  }
  EncoderSetup setup;
  setup.muxer = "mp4";
  setup.codec = codec;
  setup.rotation = options.rotation;
  setup.pix_fmt = AV_PIX_FMT_YUV420P;
  setup.encoder_time_base = av_inv_q(av_d2q(fps, 100000));
  setup.configure = [&](AVCodecContext* encoder) {
    encoder->thread_count = options.threads;
    const bool bt709 = options.matrix == ColourMatrix::kBt709;
    encoder->colorspace = bt709 ? AVCOL_SPC_BT709 : AVCOL_SPC_SMPTE170M;
    encoder->color_primaries = bt709 ? AVCOL_PRI_BT709 : AVCOL_PRI_SMPTE170M;
    encoder->color_trc = bt709 ? AVCOL_TRC_BT709 : AVCOL_TRC_SMPTE170M;
    encoder->color_range = AVCOL_RANGE_MPEG;
    if (h264) {
      av_opt_set(encoder->priv_data, "crf", std::to_string(options.crf).c_str(), 0);
      av_opt_set(encoder->priv_data, "preset", "medium", 0);
    } else {
      encoder->flags |= AV_CODEC_FLAG_QSCALE;
      encoder->global_quality = FF_QP2LAMBDA * options.mpeg4_qscale;
    }
  };
  av_dict_set(&setup.muxer_options, "movflags", "+faststart", 0);

  ffmpeg::SwsPtr sws(sws_getContext(frames.width, frames.height, AV_PIX_FMT_RGB24, frames.width,
                                    frames.height, AV_PIX_FMT_YUV420P,
                                    SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  if (!sws) {
    av_dict_free(&setup.muxer_options);
    return Internal(path + ": cannot create the RGB -> yuv420p converter");
  }
  const int matrix = options.matrix == ColourMatrix::kBt709 ? SWS_CS_ITU709 : SWS_CS_ITU601;
  sws_setColorspaceDetails(sws.get(), sws_getCoefficients(SWS_CS_DEFAULT), 1,
                           sws_getCoefficients(matrix), 0, 0, 1 << 16, 1 << 16);

  return Encode(path, frames, std::move(setup), [&](int f, AVFrame* frame) -> Status {
    const uint8_t* src[4] = {frames.frame(f), nullptr, nullptr, nullptr};
    int src_stride[4] = {frames.width * 3, 0, 0, 0};
    if (sws_scale(sws.get(), src, src_stride, 0, frames.height, frame->data, frame->linesize) <=
        0) {
      return Internal(path + ": RGB -> yuv420p conversion failed at frame " + std::to_string(f));
    }
    return Status::Ok();
  });
}

Status WriteGif(const std::string& path, const RgbFrames& frames, double fps) {
  ADCTL_RETURN_IF_ERROR(CheckClip(path, frames, fps));
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_GIF);
  if (codec == nullptr) return FailedPrecondition(path + ": this libavcodec has no gif encoder");
  EncoderSetup setup;
  setup.muxer = "gif";
  setup.codec = codec;
  setup.pix_fmt = AV_PIX_FMT_PAL8;
  setup.encoder_time_base = av_inv_q(av_d2q(fps, 100000));
  av_dict_set(&setup.muxer_options, "loop", "0", 0);  // 0: loop forever
  return Encode(path, frames, std::move(setup), [&](int f, AVFrame* frame) -> Status {
    // One palette per frame: the gif encoder writes a local colour table where it differs.
    Palette palette = BuildPalette(frames, f);
    for (int y = 0; y < frames.height; ++y) {
      uint8_t* row = frame->data[0] + static_cast<size_t>(y) * frame->linesize[0];
      for (int x = 0; x < frames.width; ++x) row[x] = palette.nearest[Key15(frames.pixel(f, y, x))];
    }
    std::memcpy(frame->data[1], palette.argb.data(), AVPALETTE_SIZE);
    return Status::Ok();
  });
}

}  // namespace adctl

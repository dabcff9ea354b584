// VideoReader, the writers and AnimateDiff's frame sampling, on real files in a temporary folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tests/testing/temp_dir.h"
#include "worker/video/ffmpeg_log.h"
#include "worker/video/frame_sampling.h"
#include "worker/video/video_reader.h"
#include "worker/video/video_writer.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

namespace adctl {
namespace {

// FFmpeg's statistics, and its errors about the files these tests break on purpose, stay out of
// the test log (the tests check the classified errors instead). One setting for all of
// media_tests: FFmpeg's log level is process-wide.
const bool kQuiet = (QuietFfmpegLogs(), av_log_set_level(AV_LOG_FATAL), true);

// A clip with content a codec keeps well: a smooth gradient and a bright square moving right.
RgbFrames TestClip(int frames, int height, int width) {
  RgbFrames clip(frames, height, width);
  for (int f = 0; f < frames; ++f) {
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        uint8_t* p = clip.pixel(f, y, x);
        p[0] = static_cast<uint8_t>(40 + 150 * x / width);
        p[1] = static_cast<uint8_t>(60 + 120 * y / height);
        p[2] = static_cast<uint8_t>(100 + 5 * f);
        int left = 2 + 2 * f;
        if (x >= left && x < left + 12 && y >= height / 3 && y < height / 3 + 12) {
          p[0] = 240, p[1] = 230, p[2] = 30;
        }
      }
    }
  }
  return clip;
}

double ChannelMean(const RgbFrames& clip, int f, int c) {
  double sum = 0;
  for (int y = 0; y < clip.height; ++y) {
    for (int x = 0; x < clip.width; ++x) sum += clip.pixel(f, y, x)[c];
  }
  return sum / (clip.height * clip.width);
}

double MeanAbsDiff(const RgbFrames& a, int fa, const RgbFrames& b, int fb) {
  double sum = 0;
  for (size_t i = 0; i < a.frame_bytes(); ++i) sum += std::abs(a.frame(fa)[i] - b.frame(fb)[i]);
  return sum / a.frame_bytes();
}

// Decoded frames are close to what was written: per-channel means within 2 levels, mean absolute
// pixel error under `max_mad` (codec + yuv420p chroma subsampling).
void ExpectClose(const RgbFrames& written, const RgbFrames& decoded, double max_mad) {
  ASSERT_EQ(decoded.num_frames, written.num_frames);
  ASSERT_EQ(decoded.height, written.height);
  ASSERT_EQ(decoded.width, written.width);
  for (int f = 0; f < written.num_frames; ++f) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(ChannelMean(decoded, f, c), ChannelMean(written, f, c), 2.0)
          << "frame " << f << " channel " << c;
    }
    EXPECT_LT(MeanAbsDiff(written, f, decoded, f), max_mad) << "frame " << f;
  }
}

TEST(FrameSamplingTest, MatchesAnimateDiffLinspaceTable) {
  struct Case {
    int64_t length;
    int frames, stride;
    int64_t start;
    std::vector<int64_t> expected;
  };
  // Expected values: numpy.linspace(start, start + span - 1, F) in float64, then astype(int).
  const std::vector<Case> cases = {
      {100, 16, 4, 0, {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60}},
      {100, 16, 4, 39, {39, 43, 47, 51, 55, 59, 63, 67, 71, 75, 79, 83, 87, 91, 95, 99}},
      {61, 16, 4, 0, {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60}},
      {50, 8, 1, 42, {42, 43, 44, 45, 46, 47, 48, 49}},
      {20, 5, 3, 7, {7, 10, 13, 16, 19}},
      {7, 3, 5, 0, {0, 3, 6}},
      // Shorter than the span: span = L, indices repeat.
      {10, 16, 4, 0, {0, 0, 1, 1, 2, 3, 3, 4, 4, 5, 6, 6, 7, 7, 8, 9}},
      {3, 16, 4, 0, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2}},
      {30, 16, 4, 0, {0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29}},
      {40, 16, 3, 0, {0, 2, 5, 7, 10, 13, 15, 18, 20, 23, 26, 28, 31, 33, 36, 39}},
      {5, 8, 2, 0, {0, 0, 1, 1, 2, 2, 3, 4}},
      {1, 4, 2, 0, {0, 0, 0, 0}},
      {9, 1, 4, 6, {6}},
  };
  for (const Case& c : cases) {
    Result<std::vector<int64_t>> indices =
        SampleFrameIndices(c.length, c.frames, c.stride, c.start);
    ASSERT_TRUE(indices.ok()) << indices.status().ToString();
    EXPECT_EQ(*indices, c.expected)
        << "L=" << c.length << " F=" << c.frames << " stride=" << c.stride << " start=" << c.start;
  }
  EXPECT_EQ(SampleSpan(100, 16, 4), 61);
  EXPECT_EQ(SampleSpan(10, 16, 4), 10);
}

TEST(FrameSamplingTest, RejectsBadArguments) {
  EXPECT_FALSE(SampleFrameIndices(0, 16, 4, 0).ok());
  EXPECT_FALSE(SampleFrameIndices(100, 0, 4, 0).ok());
  EXPECT_FALSE(SampleFrameIndices(100, 16, 0, 0).ok());
  EXPECT_FALSE(SampleFrameIndices(100, 16, 4, -1).ok());
  Result<std::vector<int64_t>> late = SampleFrameIndices(100, 16, 4, 40);  // max start is 39
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("outside [0, 39]"), std::string::npos);
}

TEST(FrameSamplingTest, SeededStartIsUniformInRangeAndReproducible) {
  std::mt19937_64 rng(7), again(7);
  std::vector<int> hits(40, 0);
  for (int i = 0; i < 4000; ++i) {
    int64_t start = SampleStart(100, 16, 4, rng);
    ASSERT_GE(start, 0);
    ASSERT_LE(start, 39);
    ++hits[start];
    EXPECT_EQ(SampleStart(100, 16, 4, again), start);
  }
  for (int h : hits) EXPECT_GT(h, 50);  // ~100 each
  std::mt19937_64 short_rng(1);
  EXPECT_EQ(SampleStart(3, 16, 4, short_rng), 0);  // span == L: only start 0
}

// preprocess.windows_per_video: a 100-frame video, 16 frames at stride 4 (span 61, starts in
// [0, 39]), 4 windows. random: each window is AnimateDiff's rule with its own seeded generator
// (window 0 the one-window cache's clip); uniform: evenly spaced, the ends included.
TEST(FrameSamplingTest, WindowsFollowTheirRule) {
  const int64_t seed = 3, row = 11;
  const auto random = WindowStarts(100, 16, 4, 4, /*uniform=*/false, seed, row);
  ASSERT_EQ(random.size(), 4u);
  for (int64_t w = 0; w < 4; ++w) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL +
                        static_cast<uint64_t>(row) +
                        static_cast<uint64_t>(w) * 0xD1B54A32D192ED03ULL);
    EXPECT_EQ(random[static_cast<size_t>(w)], SampleStart(100, 16, 4, rng)) << w;
  }
  std::mt19937_64 one_window(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL + row);
  EXPECT_EQ(random[0], SampleStart(100, 16, 4, one_window));
  EXPECT_EQ(WindowStarts(100, 16, 4, 4, false, seed, row), random);  // reproducible
  EXPECT_NE(WindowStarts(100, 16, 4, 4, false, seed, row + 1), random);
  // The clips' frame indices are the linspace rule's from those starts.
  auto first = SampleFrameIndices(100, 16, 4, random[1]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->front(), random[1]);
  EXPECT_EQ(first->back(), random[1] + 60);

  EXPECT_EQ(WindowStarts(100, 16, 4, 4, /*uniform=*/true, seed, row),
            (std::vector<int64_t>{0, 13, 26, 39}));
  EXPECT_EQ(WindowStarts(100, 16, 4, 1, true, seed, row), (std::vector<int64_t>{19}));
  // A video no longer than the span has one place for every window.
  EXPECT_EQ(WindowStarts(20, 16, 4, 3, true, seed, row), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(WindowStarts(20, 16, 4, 3, false, seed, row), (std::vector<int64_t>{0, 0, 0}));
}

TEST(VideoRoundTripTest, Mp4H264FrameCountSizeAndPixels) {
  ASSERT_EQ(DefaultMp4Encoder(), "libx264");  // Debian's libavcodec has libx264
  TempDir dir;
  RgbFrames clip = TestClip(20, 48, 64);
  std::string path = dir.file("clip.mp4");
  Status written = WriteMp4(path, clip, 12);
  ASSERT_TRUE(written.ok()) << written.ToString();

  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  EXPECT_EQ(reader->info().num_frames, 20);
  EXPECT_TRUE(reader->info().frames_from_header);
  EXPECT_DOUBLE_EQ(reader->info().fps, 12);
  EXPECT_EQ(reader->info().width, 64);
  EXPECT_EQ(reader->info().height, 48);
  EXPECT_EQ(reader->info().codec, "h264");
  VideoResult<RgbFrames> all = reader->ReadAll();
  ASSERT_TRUE(all.ok()) << all.ToString();
  ExpectClose(clip, *all, 6.0);

  // Chosen indices (with a repeat) equal the same frames of a full read, on a second pass.
  VideoResult<RgbFrames> some = reader->ReadFrames({0, 0, 5, 19});
  ASSERT_TRUE(some.ok()) << some.ToString();
  ASSERT_EQ(some->num_frames, 4);
  const int64_t expected[] = {0, 0, 5, 19};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(MeanAbsDiff(*some, i, *all, expected[i]), 0) << i;

  // Decoder threads do not change the pixels.
  VideoReaderOptions all_cores;
  all_cores.threads = 0;
  VideoResult<VideoReader> threaded = VideoReader::Open(path, all_cores);
  ASSERT_TRUE(threaded.ok());
  VideoResult<RgbFrames> threaded_all = threaded->ReadAll();
  ASSERT_TRUE(threaded_all.ok());
  EXPECT_EQ(threaded_all->data, all->data);
}

// A phone's portrait video: frames stored landscape with a display matrix that turns them. The
// reader gives the displayed size and upright frames, the stored ones turned by hand here.
TEST(VideoRoundTripTest, ADisplayMatrixTurnsTheFramesUpright) {
  TempDir dir;
  const RgbFrames clip = TestClip(6, 48, 64);
  for (int rotation : {90, 180, 270}) {
    SCOPED_TRACE(rotation);
    const std::string path = dir.file("turned-" + std::to_string(rotation) + ".mp4");
    Mp4Options options;
    options.rotation = rotation;
    ASSERT_TRUE(WriteMp4(path, clip, 12, options).ok());
    VideoResult<VideoReader> reader = VideoReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.ToString();
    EXPECT_EQ(reader->info().rotation, rotation);
    const bool quarter = rotation != 180;
    EXPECT_EQ(reader->info().width, quarter ? 48 : 64);
    EXPECT_EQ(reader->info().height, quarter ? 64 : 48);
    // Stored pixel (y, x) is shown at: 90° clockwise (x, h-1-y), 180° (h-1-y, w-1-x),
    // 270° (w-1-x, y).
    RgbFrames upright(clip.num_frames, reader->info().height, reader->info().width);
    for (int f = 0; f < clip.num_frames; ++f) {
      for (int y = 0; y < clip.height; ++y) {
        for (int x = 0; x < clip.width; ++x) {
          const int dy = rotation == 90    ? x
                         : rotation == 180 ? clip.height - 1 - y
                                           : clip.width - 1 - x;
          const int dx = rotation == 90    ? clip.height - 1 - y
                         : rotation == 180 ? clip.width - 1 - x
                                           : y;
          std::memcpy(upright.pixel(f, dy, dx), clip.pixel(f, y, x), 3);
        }
      }
    }
    VideoResult<RgbFrames> all = reader->ReadAll();
    ASSERT_TRUE(all.ok()) << all.ToString();
    ExpectClose(upright, *all, 6.0);
  }
  Mp4Options crooked;
  crooked.rotation = 45;
  EXPECT_NE(WriteMp4(dir.file("crooked.mp4"), clip, 12, crooked)
                .message()
                .find("rotation must be 0, 90, 180 or 270 degrees, got 45"),
            std::string::npos);
}

TEST(VideoRoundTripTest, Mp4Mpeg4Part2) {
  TempDir dir;
  RgbFrames clip = TestClip(9, 64, 96);
  std::string path = dir.file("mpeg4.mp4");
  Mp4Options options;
  options.codec = Mp4Codec::kMpeg4;
  ASSERT_TRUE(WriteMp4(path, clip, 24, options).ok());
  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  EXPECT_EQ(reader->info().codec, "mpeg4");
  EXPECT_EQ(reader->info().num_frames, 9);
  EXPECT_DOUBLE_EQ(reader->info().fps, 24);
  VideoResult<RgbFrames> all = reader->ReadAll();
  ASSERT_TRUE(all.ok()) << all.ToString();
  ExpectClose(clip, *all, 8.0);
}

TEST(VideoRoundTripTest, Bt709TaggedClipDecodesWithItsMatrix) {
  // Saturated colours, where BT.601 and BT.709 differ by 10-30 levels.
  RgbFrames clip(4, 32, 64);
  for (int f = 0; f < 4; ++f) {
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 64; ++x) {
        uint8_t* p = clip.pixel(f, y, x);
        if (x < 32) {
          p[0] = 220, p[1] = 30, p[2] = 40;
        } else {
          p[0] = 30, p[1] = 60, p[2] = 230;
        }
      }
    }
  }
  TempDir dir;
  std::string path = dir.file("bt709.mp4");
  Mp4Options options;
  options.matrix = ColourMatrix::kBt709;
  ASSERT_TRUE(WriteMp4(path, clip, 8, options).ok());
  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  VideoResult<RgbFrames> all = reader->ReadAll();
  ASSERT_TRUE(all.ok()) << all.ToString();
  ExpectClose(clip, *all, 4.0);
}

TEST(VideoRoundTripTest, GifLoopsAndDecodes) {
  TempDir dir;
  RgbFrames clip = TestClip(10, 40, 56);
  std::string path = dir.file("clip.gif");
  Status written = WriteGif(path, clip, 8);
  ASSERT_TRUE(written.ok()) << written.ToString();
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.substr(0, 6), "GIF89a");
  // NETSCAPE2.0 application extension with loop count 0 (forever).
  size_t netscape = bytes.find("NETSCAPE2.0");
  ASSERT_NE(netscape, std::string::npos);
  EXPECT_EQ(bytes.substr(netscape + 11, 5), std::string("\x03\x01\x00\x00\x00", 5));

  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  EXPECT_EQ(reader->info().num_frames, 10);
  EXPECT_EQ(reader->info().codec, "gif");
  VideoResult<RgbFrames> all = reader->ReadAll();
  ASSERT_TRUE(all.ok()) << all.ToString();
  ExpectClose(clip, *all, 6.0);  // 256 colours for ~300 distinct ones
}

TEST(VideoWriterTest, RejectsBadClips) {
  TempDir dir;
  Status odd = WriteMp4(dir.file("odd.mp4"), TestClip(3, 63, 64), 8);
  EXPECT_EQ(odd.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.message().find("even width and height, got 64x63"), std::string::npos);
  EXPECT_FALSE(WriteMp4(dir.file("empty.mp4"), RgbFrames(), 8).ok());
  EXPECT_FALSE(WriteGif(dir.file("zero_fps.gif"), TestClip(2, 8, 8), 0).ok());
  Status no_dir = WriteMp4(dir.file("no/such/dir.mp4"), TestClip(2, 8, 8), 8);
  EXPECT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.message().find("no/such/dir.mp4"), std::string::npos);
}

TEST(VideoWriterTest, TilesClipsOnAGrid) {
  std::vector<RgbFrames> clips;
  for (int i = 0; i < 3; ++i) {
    RgbFrames clip(2 + i, 4, 6);  // 2, 3, 4 frames
    for (int f = 0; f < clip.num_frames; ++f) {
      std::fill(clip.frame(f), clip.frame(f) + clip.frame_bytes(),
                static_cast<uint8_t>(10 * i + f));
    }
    clips.push_back(clip);
  }
  Result<RgbFrames> grid = TileClips(clips, 2, 1, 255);
  ASSERT_TRUE(grid.ok()) << grid.status().ToString();
  EXPECT_EQ(grid->num_frames, 4);
  EXPECT_EQ(grid->height, 4 * 2 + 1);
  EXPECT_EQ(grid->width, 6 * 2 + 1);
  EXPECT_EQ(grid->pixel(0, 0, 0)[0], 0);    // clip 0
  EXPECT_EQ(grid->pixel(0, 0, 7)[0], 10);   // clip 1, right of the 1-pixel gap
  EXPECT_EQ(grid->pixel(0, 5, 0)[0], 20);   // clip 2, second row
  EXPECT_EQ(grid->pixel(0, 0, 6)[0], 255);  // gap
  EXPECT_EQ(grid->pixel(0, 5, 8)[0], 255);  // empty cell
  EXPECT_EQ(grid->pixel(3, 0, 0)[0], 1);    // clip 0 holds its last frame
  EXPECT_EQ(grid->pixel(3, 5, 0)[0], 23);   // clip 2's frame 3
  clips[1] = RgbFrames(2, 4, 8);
  Result<RgbFrames> mismatch = TileClips(clips, 2);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("clip 1"), std::string::npos);
  EXPECT_FALSE(TileClips({}, 2).ok());
}

TEST(VideoReaderErrorTest, MissingFile) {
  TempDir dir;
  VideoResult<VideoReader> reader = VideoReader::Open(dir.file("absent.mp4"));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error(), VideoError::kMissing);
  EXPECT_EQ(reader.status().code(), StatusCode::kNotFound);
  EXPECT_NE(reader.status().message().find("absent.mp4"), std::string::npos);
  EXPECT_EQ(std::string(VideoErrorName(reader.error())), "missing");
}

TEST(VideoReaderErrorTest, TextFileNamedMp4IsUnreadable) {
  TempDir dir;
  std::string path = dir.file("notes.mp4");
  std::ofstream(path) << "this is not a video, just some text\nsecond line\n";
  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error(), VideoError::kUnreadable) << reader.ToString();
  EXPECT_NE(reader.status().message().find("notes.mp4"), std::string::npos);
  EXPECT_EQ(VideoReader::Open(dir.path()).error(), VideoError::kUnreadable);  // a directory
}

// Writes the first half of `path`'s bytes to `cut`.
void CutInHalf(const std::string& path, const std::string& cut) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
}

TEST(VideoReaderErrorTest, Mp4CutInHalfIsTruncated) {
  TempDir dir;
  std::string path = dir.file("whole.mp4");
  ASSERT_TRUE(WriteMp4(path, TestClip(30, 64, 64), 12).ok());
  std::string cut = dir.file("half.mp4");
  CutInHalf(path, cut);
  VideoResult<VideoReader> reader = VideoReader::Open(cut);
  ASSERT_TRUE(reader.ok()) << reader.ToString();  // faststart: the index is in the first half
  EXPECT_EQ(reader->info().num_frames, 30);
  VideoResult<RgbFrames> all = reader->ReadAll();
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.error(), VideoError::kTruncated) << all.ToString();
  EXPECT_EQ(all.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(all.status().message().find("half.mp4"), std::string::npos);
  EXPECT_NE(all.status().message().find("of the 30 frames"), std::string::npos) << all.ToString();
}

TEST(VideoReaderErrorTest, TruncatedMpeg4StillReadsFramesBeforeTheCut) {
  // MPEG-4 part 2 frames are of similar size, so the first half holds whole frames.
  TempDir dir;
  std::string path = dir.file("whole.mp4");
  Mp4Options options;
  options.codec = Mp4Codec::kMpeg4;
  ASSERT_TRUE(WriteMp4(path, TestClip(30, 64, 64), 12, options).ok());
  std::string cut = dir.file("half.mp4");
  CutInHalf(path, cut);
  VideoResult<VideoReader> reader = VideoReader::Open(cut);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  VideoResult<RgbFrames> first = reader->ReadFrames({0, 1, 2});
  EXPECT_TRUE(first.ok()) << first.ToString();
  VideoResult<RgbFrames> last = reader->ReadFrames({29});
  ASSERT_FALSE(last.ok());
  EXPECT_EQ(last.error(), VideoError::kTruncated) << last.ToString();
}

// Whether a damaged file is usable is decided from the file, not from the frames a seed picks
// (issue 35 item 6): the half-cut MPEG-4 above reads its first frames, yet is incomplete.
TEST(VideoReaderErrorTest, CheckCompleteTellsACutFileFromTheFileAlone) {
  TempDir dir;
  std::string path = dir.file("whole.mp4");
  Mp4Options options;
  options.codec = Mp4Codec::kMpeg4;
  ASSERT_TRUE(WriteMp4(path, TestClip(30, 64, 64), 12, options).ok());
  VideoResult<VideoReader> whole = VideoReader::Open(path);
  ASSERT_TRUE(whole.ok()) << whole.ToString();
  VideoResult<int64_t> complete = whole->CheckComplete();
  ASSERT_TRUE(complete.ok()) << complete.ToString();
  EXPECT_EQ(*complete, 30);
  EXPECT_TRUE(whole->ReadFrames({0, 29}).ok()) << "the reader still reads after the check";
  std::string cut = dir.file("half.mp4");
  CutInHalf(path, cut);
  VideoResult<VideoReader> reader = VideoReader::Open(cut);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  for (int pass = 0; pass < 2; ++pass) {  // the same answer every time
    VideoResult<int64_t> checked = reader->CheckComplete();
    ASSERT_FALSE(checked.ok());
    EXPECT_EQ(checked.error(), VideoError::kTruncated) << checked.ToString();
    EXPECT_NE(checked.status().message().find("claims 30 frames"), std::string::npos)
        << checked.ToString();
  }
  EXPECT_TRUE(reader->ReadFrames({0, 1, 2}).ok()) << "frames before the cut still decode";
}

TEST(VideoReaderErrorTest, EveryCutOfAFileFailsCleanly) {
  // Cut points across the whole file: each read either succeeds or returns a classified error.
  TempDir dir;
  std::string path = dir.file("whole.mp4");
  ASSERT_TRUE(WriteMp4(path, TestClip(16, 32, 48), 8).ok());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937_64 rng(5);
  for (int k = 0; k <= 24; ++k) {
    size_t cut = bytes.size() * k / 24;
    std::string cut_path = dir.file("cut" + std::to_string(k) + ".mp4");
    std::string part = bytes.substr(0, cut);
    if (k % 3 == 1 && cut > 64) part[rng() % cut] ^= 0x5A;  // and a flipped byte
    std::ofstream(cut_path, std::ios::binary) << part;
    VideoResult<VideoReader> reader = VideoReader::Open(cut_path);
    if (!reader.ok()) {
      EXPECT_TRUE(reader.error() == VideoError::kUnreadable ||
                  reader.error() == VideoError::kZeroFrames)
          << k << ": " << reader.ToString();
      continue;
    }
    VideoResult<RgbFrames> all = reader->ReadAll();
    if (!all.ok()) {
      EXPECT_TRUE(all.error() == VideoError::kTruncated || all.error() == VideoError::kUnreadable)
          << k << ": " << all.ToString();
    }
  }
}

// A file with a video stream and no frames, written with FFmpeg directly (WriteMp4 refuses empty
// clips); the container is chosen by the extension.
void WriteZeroFrameVideo(const std::string& path) {
  AVFormatContext* output = nullptr;
  ASSERT_GE(avformat_alloc_output_context2(&output, nullptr, nullptr, path.c_str()), 0);
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  AVCodecContext* encoder = avcodec_alloc_context3(codec);
  encoder->width = 32;
  encoder->height = 32;
  encoder->pix_fmt = AV_PIX_FMT_YUV420P;
  encoder->time_base = {1, 8};
  ASSERT_GE(avcodec_open2(encoder, codec, nullptr), 0);
  AVStream* stream = avformat_new_stream(output, nullptr);
  avcodec_parameters_from_context(stream->codecpar, encoder);
  stream->time_base = encoder->time_base;
  ASSERT_GE(avio_open(&output->pb, path.c_str(), AVIO_FLAG_WRITE), 0);
  ASSERT_GE(avformat_write_header(output, nullptr), 0);
  ASSERT_GE(av_write_trailer(output), 0);
  avio_closep(&output->pb);
  avformat_free_context(output);
  avcodec_free_context(&encoder);
}

TEST(VideoReaderErrorTest, ZeroFrames) {
  TempDir dir;
  // AVI keeps a stream without frames (header frame count 0; counting packets finds none).
  std::string path = dir.file("empty.avi");
  WriteZeroFrameVideo(path);
  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error(), VideoError::kZeroFrames) << reader.ToString();
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(reader.status().message().find("empty.avi"), std::string::npos);

  // FFmpeg's MP4 demuxer drops a track without samples: such an MP4 has no video stream.
  std::string mp4 = dir.file("empty.mp4");
  WriteZeroFrameVideo(mp4);
  VideoResult<VideoReader> no_stream = VideoReader::Open(mp4);
  ASSERT_FALSE(no_stream.ok());
  EXPECT_EQ(no_stream.error(), VideoError::kUnreadable);
  EXPECT_NE(no_stream.status().message().find("no video stream"), std::string::npos);
}

TEST(VideoReaderErrorTest, ShortClipAnimateDiffRepeatsAndMinFramesRejects) {
  TempDir dir;
  std::string path = dir.file("three.mp4");
  RgbFrames clip = TestClip(3, 32, 32);
  ASSERT_TRUE(WriteMp4(path, clip, 8).ok());

  // AnimateDiff's rule (16 frames, stride 4) on a 3-frame video: span 3, indices repeat.
  VideoResult<VideoReader> reader = VideoReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  ASSERT_EQ(reader->info().num_frames, 3);
  Result<std::vector<int64_t>> indices = SampleFrameIndices(3, 16, 4, 0);
  ASSERT_TRUE(indices.ok());
  VideoResult<RgbFrames> sample = reader->ReadFrames(*indices);
  ASSERT_TRUE(sample.ok()) << sample.ToString();
  EXPECT_EQ(sample->num_frames, 16);
  EXPECT_EQ(MeanAbsDiff(*sample, 0, *sample, 7), 0);  // both frame 0

  // An index past the end is kTooShort.
  VideoResult<RgbFrames> past = reader->ReadFrames({0, 3});
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.error(), VideoError::kTooShort);

  // With a minimum of 16 frames the same file is too short.
  VideoReaderOptions options;
  options.min_frames = 16;
  VideoResult<VideoReader> strict = VideoReader::Open(path, options);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.error(), VideoError::kTooShort);
  EXPECT_EQ(strict.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(strict.status().message().find("3 frames, fewer than the minimum of 16"),
            std::string::npos)
      << strict.ToString();

  // Unsorted indices are the caller's error.
  VideoResult<RgbFrames> unsorted = reader->ReadFrames({2, 1});
  ASSERT_FALSE(unsorted.ok());
  EXPECT_EQ(unsorted.status().code(), StatusCode::kInvalidArgument);
}

TEST(VideoReaderTest, SeveralThreadsDecodeAtOnce) {
  TempDir dir;
  std::string path = dir.file("shared.mp4");
  ASSERT_TRUE(WriteMp4(path, TestClip(24, 48, 64), 24).ok());
  VideoResult<VideoReader> reference = VideoReader::Open(path);
  ASSERT_TRUE(reference.ok());
  VideoResult<RgbFrames> expected = reference->ReadAll();
  ASSERT_TRUE(expected.ok());

  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        // Each thread also writes its own file while others decode.
        std::string own = dir.file("own" + std::to_string(t) + ".mp4");
        if (!WriteMp4(own, TestClip(4, 16, 16), 8).ok()) ++mismatches[t];
        VideoResult<VideoReader> reader = VideoReader::Open(path);
        if (!reader.ok()) {
          ++mismatches[t];
          continue;
        }
        VideoResult<RgbFrames> frames = reader->ReadAll();
        if (!frames.ok() || frames->data != expected->data) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace adctl

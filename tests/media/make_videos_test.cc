#include "worker/video/make_videos.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "tests/testing/temp_dir.h"
#include "worker/video/video_csv.h"
#include "worker/video/video_reader.h"

namespace adctl {
namespace {

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

int ColourIndex(const std::string& name) {
  const auto& colours = SyntheticColours();
  for (size_t i = 0; i < colours.size(); ++i) {
    if (name == colours[i].name) return static_cast<int>(i);
  }
  ADD_FAILURE() << "unknown colour " << name;
  return -1;
}

// Pixels of frame f nearest each synthetic colour, and the centroid of those of `colour`.
struct FrameStats {
  std::vector<int> counts;
  double cx = 0, cy = 0;
};

FrameStats Stats(const RgbFrames& frames, int f, int colour) {
  FrameStats stats;
  stats.counts.assign(SyntheticColours().size(), 0);
  int n = 0;
  for (int y = 0; y < frames.height; ++y) {
    for (int x = 0; x < frames.width; ++x) {
      int c = NearestSyntheticColour(frames.pixel(f, y, x));
      ++stats.counts[c];
      if (c == colour) stats.cx += x, stats.cy += y, ++n;
    }
  }
  if (n > 0) stats.cx /= n, stats.cy /= n;
  return stats;
}

TEST(MakeVideosTest, PlanIsDeterministicAndCoversTheSettings) {
  std::vector<SyntheticClip> a = PlanSyntheticVideos(60, 11), b = PlanSyntheticVideos(60, 11);
  std::vector<SyntheticClip> c = PlanSyntheticVideos(60, 12);
  std::set<std::string> sizes, captions_a, captions_c;
  std::set<double> fps;
  std::set<int> shapes, motions;
  bool any_gradient = false, any_plain = false;
  for (int i = 0; i < 60; ++i) {
    EXPECT_EQ(a[i].caption, b[i].caption);
    EXPECT_EQ(a[i].frames, b[i].frames);
    EXPECT_GE(a[i].frames, 12);
    EXPECT_LE(a[i].frames, 40);
    EXPECT_NE(a[i].shape_colour, a[i].background_colour);
    EXPECT_EQ(a[i].width % 2, 0);
    EXPECT_EQ(a[i].height % 2, 0);
    sizes.insert(std::to_string(a[i].width) + "x" + std::to_string(a[i].height));
    fps.insert(a[i].fps);
    shapes.insert(static_cast<int>(a[i].shape));
    motions.insert(static_cast<int>(a[i].motion));
    (a[i].gradient ? any_gradient : any_plain) = true;
    captions_a.insert(a[i].caption);
    captions_c.insert(c[i].caption);
  }
  EXPECT_GE(sizes.size(), 4u);
  EXPECT_EQ(fps, (std::set<double>{8, 12, 24}));
  EXPECT_EQ(shapes.size(), 3u);
  EXPECT_EQ(motions.size(), 5u);
  EXPECT_TRUE(any_gradient && any_plain);
  EXPECT_NE(captions_a, captions_c);  // another seed, other clips
  EXPECT_EQ(a[0].video_id, "000000");
}

TEST(MakeVideosTest, AFixedFormatShapesEveryClipAndKeepsTheRestOfThePlan) {
  SyntheticVideoFormat webvid;
  webvid.width = 596;
  webvid.height = 336;
  webvid.frames = 30;
  webvid.fps = 25;
  std::vector<SyntheticClip> mixed = PlanSyntheticVideos(6, 7);
  std::vector<SyntheticClip> fixed = PlanSyntheticVideos(6, 7, webvid);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(fixed[i].width, 596);
    EXPECT_EQ(fixed[i].height, 336);
    EXPECT_EQ(fixed[i].frames, 30);
    EXPECT_EQ(fixed[i].fps, 25);
    EXPECT_EQ(fixed[i].caption, mixed[i].caption);
  }
  TempDir dir;
  ASSERT_TRUE(MakeVideos(dir.path(), 1, 7, webvid).ok());
  VideoResult<VideoReader> reader = VideoReader::Open(dir.file("000000.mp4"));
  ASSERT_TRUE(reader.ok()) << reader.ToString();
  EXPECT_EQ(reader->info().width, 596);
  EXPECT_EQ(reader->info().num_frames, 30);
  EXPECT_DOUBLE_EQ(reader->info().fps, 25);
  webvid.width = 595;  // odd: 4:2:0 cannot hold it
  Status odd = MakeVideos(dir.path(), 1, 7, webvid);
  EXPECT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("even"), std::string::npos) << odd.ToString();
}

TEST(MakeVideosTest, WritesDecodableClipsWhoseCaptionsDescribeThem) {
  TempDir dir;
  const int kClips = 8;
  Status made = MakeVideos(dir.path(), kClips, 2026);
  ASSERT_TRUE(made.ok()) << made.ToString();
  std::vector<SyntheticClip> plan = PlanSyntheticVideos(kClips, 2026);

  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(dir.file("videos.csv"));
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), static_cast<size_t>(kClips));
  for (int i = 0; i < kClips; ++i) {
    const VideoEntry& entry = (*entries)[i];
    const SyntheticClip& clip = plan[i];
    SCOPED_TRACE(entry.video_id + ": " + entry.caption);
    EXPECT_EQ(entry.video_id, clip.video_id);
    EXPECT_EQ(entry.caption, clip.caption);
    EXPECT_EQ(entry.path, dir.file(clip.video_id + ".mp4"));

    VideoResult<VideoReader> reader = VideoReader::Open(entry.path);
    ASSERT_TRUE(reader.ok()) << reader.ToString();
    EXPECT_EQ(reader->info().num_frames, clip.frames);
    EXPECT_EQ(reader->info().width, clip.width);
    EXPECT_EQ(reader->info().height, clip.height);
    EXPECT_DOUBLE_EQ(reader->info().fps, clip.fps);
    VideoResult<RgbFrames> ends = reader->ReadFrames({0, clip.frames - 1});
    ASSERT_TRUE(ends.ok()) << ends.ToString();

    // "a <shape colour> <shape> <motion...> on a <background colour> [gradient] background"
    std::vector<std::string> words = Words(entry.caption);
    ASSERT_GE(words.size(), 7u);
    const int shape_colour = ColourIndex(words[1]);
    const int background = ColourIndex(words[words.size() - (clip.gradient ? 3 : 2)]);
    FrameStats first = Stats(*ends, 0, shape_colour);
    FrameStats last = Stats(*ends, 1, shape_colour);
    // Dominant colour: the background; second: the shape.
    std::vector<int> order(first.counts.size());
    for (size_t c = 0; c < order.size(); ++c) order[c] = static_cast<int>(c);
    std::sort(order.begin(), order.end(),
              [&](int x, int y) { return first.counts[x] > first.counts[y]; });
    EXPECT_EQ(order[0], background)
        << "counts of colour " << order[0] << ": " << first.counts[order[0]];
    EXPECT_EQ(order[1], shape_colour);

    // The motion words match what the shape does between the first and last frame.
    const std::string motion = words[3] == "growing" ? "growing" : words[4];
    if (motion == "left") {
      EXPECT_LT(last.cx, first.cx - 5);
    } else if (motion == "right") {
      EXPECT_GT(last.cx, first.cx + 5);
    } else if (motion == "up") {
      EXPECT_LT(last.cy, first.cy - 5);
    } else if (motion == "down") {
      EXPECT_GT(last.cy, first.cy + 5);
    } else {
      EXPECT_EQ(motion, "growing");
      EXPECT_GT(last.counts[shape_colour], 2 * first.counts[shape_colour]);
    }
  }
}

TEST(MakeVideosTest, RejectsNoClips) {
  TempDir dir;
  EXPECT_EQ(MakeVideos(dir.path(), 0, 1).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace adctl

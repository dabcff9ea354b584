// Synthetic video-caption data: real encoded clips of a moving shape with a caption that says
// what moves, for tests, demos and the tiny end-to-end training job before real data is there.
//
// Each clip is one circle, square or triangle in a named colour on a plain or vertical-gradient
// background of another named colour, moving left, right, up or down, or growing; sizes 64x64 to
// 160x96, 8/12/24 fps, 12-40 frames. Captions read "a red circle moving left on a blue
// background" / "a green square growing on a black gradient background". Everything follows
// from the seed (SplitMix64, so every standard library gives the same clips).
// Pure functions apart from MakeVideos' files; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/video/rgb_frames.h"

namespace adctl {

struct NamedColour {
  const char* name;
  uint8_t r, g, b;
};

// The colours clips use, far enough apart that codec error and the gradient (down to 80% of the
// colour) never make one look nearer another.
const std::vector<NamedColour>& SyntheticColours();
// The nearest of SyntheticColours (index), by squared RGB distance.
int NearestSyntheticColour(const uint8_t* rgb);

enum class SyntheticShape { kCircle, kSquare, kTriangle };
enum class SyntheticMotion { kLeft, kRight, kUp, kDown, kGrowing };

struct SyntheticClip {
  std::string video_id;  // "000000", "000001", ...
  int width = 0, height = 0, frames = 0;
  double fps = 0;
  SyntheticShape shape = SyntheticShape::kCircle;
  SyntheticMotion motion = SyntheticMotion::kLeft;
  int shape_colour = 0;       // index into SyntheticColours()
  int background_colour = 0;  // another index
  bool gradient = false;
  int offset = 0;  // the shape's path: pixels off the centre line, across the motion
  std::string caption;
};

// One size, length and rate for every clip instead of the mixed ones (0: keep the mixed value):
// benchmark data shaped like a real dataset, e.g. WebVid's 596×336 at 25 fps for 10 s.
struct SyntheticVideoFormat {
  int width = 0, height = 0, frames = 0;  // width and height even (H.264's 4:2:0)
  double fps = 0;
};

// What MakeVideos(…, clips, seed, format) writes, without writing it.
std::vector<SyntheticClip> PlanSyntheticVideos(int clips, uint64_t seed,
                                               const SyntheticVideoFormat& format = {});
// The clip's frames, [frames][height][width][3].
RgbFrames RenderSyntheticClip(const SyntheticClip& clip);

// Writes `clips` H.264 MP4 files `{videoid}.mp4` and `videos.csv` (`videoid,name,page_dir`, the
// caption in `name`, page_dir "synthetic") to `out_dir` (created if missing). Errors name the
// file.
Status MakeVideos(const std::string& out_dir, int clips, uint64_t seed,
                  const SyntheticVideoFormat& format = {});

}  // namespace adctl

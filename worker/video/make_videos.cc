#include "worker/video/make_videos.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "worker/video/video_csv.h"
#include "worker/video/video_writer.h"

namespace adctl {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, portable, good enough for picking clip settings.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (the modulo bias is below 2^-50 for these n).
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

struct Size {
  int width, height;
};
constexpr Size kSizes[] = {{96, 64}, {128, 128}, {160, 96}, {64, 64}, {128, 96}};
constexpr double kFps[] = {8, 12, 24};
constexpr const char* kShapeNames[] = {"circle", "square", "triangle"};
constexpr const char* kMotionNames[] = {"moving left", "moving right", "moving up", "moving down",
                                        "growing"};

// Centre and half-size of the shape at frame f.
struct Placement {
  double cx, cy, r;
};

Placement Place(const SyntheticClip& clip, int f) {
  const double m = std::min(clip.width, clip.height);
  const double t = clip.frames > 1 ? static_cast<double>(f) / (clip.frames - 1) : 0;
  const double cx = clip.width / 2.0, cy = clip.height / 2.0;
  if (clip.motion == SyntheticMotion::kGrowing) return {cx, cy, m * (0.15 + 0.25 * t)};
  const double r = 0.18 * m;
  const double x_from = r + 2, x_to = clip.width - r - 2;
  const double y_from = r + 2, y_to = clip.height - r - 2;
  switch (clip.motion) {
    case SyntheticMotion::kLeft:
      return {x_to + (x_from - x_to) * t, cy + clip.offset, r};
    case SyntheticMotion::kRight:
      return {x_from + (x_to - x_from) * t, cy + clip.offset, r};
    case SyntheticMotion::kUp:
      return {cx + clip.offset, y_to + (y_from - y_to) * t, r};
    default:  // kDown
      return {cx + clip.offset, y_from + (y_to - y_from) * t, r};
  }
}

bool Inside(SyntheticShape shape, const Placement& p, double x, double y) {
  const double dx = x - p.cx, dy = y - p.cy;
  switch (shape) {
    case SyntheticShape::kCircle:
      return dx * dx + dy * dy <= p.r * p.r;
    case SyntheticShape::kSquare:
      return std::fabs(dx) <= p.r && std::fabs(dy) <= p.r;
    case SyntheticShape::kTriangle:  // apex up, base at cy + r, as wide as it is tall
      return dy >= -p.r && dy <= p.r && std::fabs(dx) <= (dy + p.r) / 2;
  }
  return false;
}

}  // namespace

const std::vector<NamedColour>& SyntheticColours() {
  static const std::vector<NamedColour> colours = {
      {"red", 220, 40, 40},     {"green", 40, 180, 70},   {"blue", 40, 80, 220},
      {"yellow", 240, 220, 50}, {"white", 240, 240, 240}, {"black", 20, 20, 20},
      {"purple", 150, 60, 200},
  };
  return colours;
}

int NearestSyntheticColour(const uint8_t* rgb) {
  const auto& colours = SyntheticColours();
  int best = 0, best_d = INT32_MAX;
  for (size_t i = 0; i < colours.size(); ++i) {
    int dr = rgb[0] - colours[i].r, dg = rgb[1] - colours[i].g, db = rgb[2] - colours[i].b;
    int d = dr * dr + dg * dg + db * db;
    if (d < best_d) best_d = d, best = static_cast<int>(i);
  }
  return best;
}

std::vector<SyntheticClip> PlanSyntheticVideos(int clips, uint64_t seed,
                                               const SyntheticVideoFormat& format) {
  SplitMix64 rng(seed);
  const int num_colours = static_cast<int>(SyntheticColours().size());
  std::vector<SyntheticClip> plan;
  for (int i = 0; i < clips; ++i) {
    SyntheticClip clip;
    char id[16];
    std::snprintf(id, sizeof(id), "%06d", i);
    clip.video_id = id;
    const Size size = kSizes[rng.Below(5)];
    clip.width = size.width;
    clip.height = size.height;
    clip.fps = kFps[rng.Below(3)];
    clip.frames = 12 + rng.Below(29);  // 12..40
    // A fixed format replaces the draws above, which still happen: the rest of the plan (shapes,
    // colours, captions) is the same with or without it.
    if (format.width > 0) clip.width = format.width;
    if (format.height > 0) clip.height = format.height;
    if (format.frames > 0) clip.frames = format.frames;
    if (format.fps > 0) clip.fps = format.fps;
    clip.shape = static_cast<SyntheticShape>(rng.Below(3));
    clip.motion = static_cast<SyntheticMotion>(rng.Below(5));
    clip.background_colour = rng.Below(num_colours);
    clip.shape_colour = (clip.background_colour + 1 + rng.Below(num_colours - 1)) % num_colours;
    clip.gradient = rng.Below(2) == 1;
    // Off the centre line by up to a sixth of the frame, staying inside it.
    const int across = clip.motion == SyntheticMotion::kUp || clip.motion == SyntheticMotion::kDown
                           ? clip.width
                           : clip.height;
    clip.offset =
        clip.motion == SyntheticMotion::kGrowing ? 0 : rng.Below(across / 3 + 1) - across / 6;
    clip.caption = std::string("a ") + SyntheticColours()[clip.shape_colour].name + " " +
                   kShapeNames[static_cast<int>(clip.shape)] + " " +
                   kMotionNames[static_cast<int>(clip.motion)] + " on a " +
                   SyntheticColours()[clip.background_colour].name +
                   (clip.gradient ? " gradient" : "") + " background";
    plan.push_back(std::move(clip));
  }
  return plan;
}

RgbFrames RenderSyntheticClip(const SyntheticClip& clip) {
  RgbFrames out(clip.frames, clip.height, clip.width);
  const NamedColour& bg = SyntheticColours()[clip.background_colour];
  const NamedColour& fg = SyntheticColours()[clip.shape_colour];
  for (int f = 0; f < clip.frames; ++f) {
    const Placement p = Place(clip, f);
    for (int y = 0; y < clip.height; ++y) {
      // Gradient: 80% of the colour at the top to 100% at the bottom.
      const double shade = clip.gradient ? 0.8 + 0.2 * y / std::max(1, clip.height - 1) : 1.0;
      for (int x = 0; x < clip.width; ++x) {
        uint8_t* px = out.pixel(f, y, x);
        if (Inside(clip.shape, p, x + 0.5, y + 0.5)) {
          px[0] = fg.r, px[1] = fg.g, px[2] = fg.b;
        } else {
          px[0] = static_cast<uint8_t>(std::lround(bg.r * shade));
          px[1] = static_cast<uint8_t>(std::lround(bg.g * shade));
          px[2] = static_cast<uint8_t>(std::lround(bg.b * shade));
        }
      }
    }
  }
  return out;
}

Status MakeVideos(const std::string& out_dir, int clips, uint64_t seed,
                  const SyntheticVideoFormat& format) {
  if (clips < 1)
    return InvalidArgument("MakeVideos: clips must be >= 1, got " + std::to_string(clips));
  if (format.width < 0 || format.height < 0 || format.width % 2 != 0 || format.height % 2 != 0) {
    return InvalidArgument("MakeVideos: width and height must be even and >= 0, got " +
                           std::to_string(format.width) + "x" + std::to_string(format.height));
  }
  if (format.frames < 0 || format.fps < 0) {
    return InvalidArgument("MakeVideos: frames and fps must be >= 0");
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Internal(out_dir + ": cannot create the folder: " + ec.message());
  std::vector<std::vector<std::string>> rows;
  for (const SyntheticClip& clip : PlanSyntheticVideos(clips, seed, format)) {
    ADCTL_RETURN_IF_ERROR(
        WriteMp4(out_dir + "/" + clip.video_id + ".mp4", RenderSyntheticClip(clip), clip.fps));
    rows.push_back({clip.video_id, clip.caption, "synthetic"});
  }
  return WriteCsv(out_dir + "/videos.csv", {"videoid", "name", "page_dir"}, rows);
}

}  // namespace adctl

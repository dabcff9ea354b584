// TileClips (video_writer.h): clips side by side, no FFmpeg involved.
#include <algorithm>
#include <cstring>

#include "worker/video/video_writer.h"

namespace adctl {

Result<RgbFrames> TileClips(const std::vector<RgbFrames>& clips, int columns, int gap,
                            uint8_t gap_value) {
  if (clips.empty()) return InvalidArgument("TileClips: no clips");
  if (columns < 1) return InvalidArgument("TileClips: columns must be >= 1");
  if (gap < 0) return InvalidArgument("TileClips: gap must be >= 0");
  const int h = clips[0].height, w = clips[0].width;
  int frames = 0;
  for (size_t i = 0; i < clips.size(); ++i) {
    if (clips[i].height != h || clips[i].width != w || clips[i].num_frames < 1) {
      return InvalidArgument("TileClips: clip " + std::to_string(i) + " is " +
                             std::to_string(clips[i].num_frames) + " frames of " +
                             std::to_string(clips[i].width) + "x" +
                             std::to_string(clips[i].height) + ", clip 0 is " + std::to_string(w) +
                             "x" + std::to_string(h) + " (all must match, >= 1 frame)");
    }
    frames = std::max(frames, clips[i].num_frames);
  }
  const int cols = std::min<int>(columns, static_cast<int>(clips.size()));
  const int rows = (static_cast<int>(clips.size()) + cols - 1) / cols;
  RgbFrames grid(frames, rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap);
  std::fill(grid.data.begin(), grid.data.end(), gap_value);
  for (int f = 0; f < frames; ++f) {
    for (size_t i = 0; i < clips.size(); ++i) {
      const RgbFrames& clip = clips[i];
      int source = std::min(f, clip.num_frames - 1);
      int top = static_cast<int>(i) / cols * (h + gap),
          left = static_cast<int>(i) % cols * (w + gap);
      for (int y = 0; y < h; ++y) {
        std::memcpy(grid.pixel(f, top + y, left), clip.pixel(source, y, 0),
                    static_cast<size_t>(w) * 3);
      }
    }
  }
  return grid;
}

}  // namespace adctl

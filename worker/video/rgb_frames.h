// A clip of decoded frames in host memory: uint8 RGB24, laid out [F][H][W][3] (the layout
// decord and AnimateDiff's data loader hand to torch before `permute(0, 3, 1, 2)`).
// A plain value type; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace adctl {

struct RgbFrames {
  int num_frames = 0;
  int height = 0;
  int width = 0;
  std::vector<uint8_t> data;  // num_frames * height * width * 3 bytes

  RgbFrames() = default;
  RgbFrames(int frames, int h, int w)
      : num_frames(frames), height(h), width(w), data(FrameBytes(h, w) * frames) {}

  static size_t FrameBytes(int h, int w) { return static_cast<size_t>(h) * w * 3; }
  size_t frame_bytes() const { return FrameBytes(height, width); }
  uint8_t* frame(int f) { return data.data() + frame_bytes() * f; }
  const uint8_t* frame(int f) const { return data.data() + frame_bytes() * f; }
  // Pointer to the R byte of pixel (y, x) of frame f.
  uint8_t* pixel(int f, int y, int x) {
    return frame(f) + (static_cast<size_t>(y) * width + x) * 3;
  }
  const uint8_t* pixel(int f, int y, int x) const {
    return frame(f) + (static_cast<size_t>(y) * width + x) * 3;
  }
};

}  // namespace adctl

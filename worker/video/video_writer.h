// Writes RGB clips ([F][H][W][3] uint8, rgb_frames.h) as MP4 or animated GIF with FFmpeg's
// libraries, and tiles several clips into one grid clip (validation samples, the synthetic
// dataset).
//
// MP4: H.264 through libx264 when the installed libavcodec has that encoder (Debian's does),
// else MPEG-4 part 2; yuv420p (so width and height must be even), BT.601 (or BT.709) limited
// range, tagged in the stream; `+faststart` (the index before the data, so a cut-off file still
// opens and reads as truncated). GIF: FFmpeg's gif encoder on a 256-colour palette per frame
// (median cut over 15-bit colours, nearest-colour mapping, no dithering), looping forever.
// Thread-safety: the functions are independent; call them from several threads on different
// paths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/video/rgb_frames.h"

namespace adctl {

enum class Mp4Codec { kAuto, kH264, kMpeg4 };
// The RGB -> YCbCr matrix, written into the stream's colour tags (limited range either way).
enum class ColourMatrix { kBt601, kBt709 };

struct Mp4Options {
  Mp4Codec codec = Mp4Codec::kAuto;            // kAuto: H.264 if libx264 is there, else MPEG-4
  int crf = 18;                                // H.264 constant rate factor (lower = better)
  int mpeg4_qscale = 3;                        // MPEG-4 fixed quantiser, 1..31 (lower = better)
  int threads = 1;                             // encoder threads; 1 gives a reproducible bitstream
  ColourMatrix matrix = ColourMatrix::kBt601;  // SD convention; kBt709 for HD
  // Degrees a player turns the stored frames clockwise for display (0, 90, 180, 270), written as
  // the stream's display matrix, as phones record portrait video.
  int rotation = 0;
};

// The encoder kAuto picks: "libx264" or "mpeg4".
std::string DefaultMp4Encoder();

// Writes `frames` at `fps` (> 0) to `path`. Errors name the path and the FFmpeg call that failed;
// odd or zero sizes and empty clips are InvalidArgument.
Status WriteMp4(const std::string& path, const RgbFrames& frames, double fps,
                const Mp4Options& options = {});
Status WriteGif(const std::string& path, const RgbFrames& frames, double fps);

// Places clips of one size on a grid of `columns` (rows as needed), row-major, with `gap` pixels
// of `gap_value` between and around none of them. The result has the most frames of any clip;
// a shorter clip holds its last frame. Errors: no clips, differing sizes, columns < 1.
Result<RgbFrames> TileClips(const std::vector<RgbFrames>& clips, int columns, int gap = 2,
                            uint8_t gap_value = 0);

}  // namespace adctl

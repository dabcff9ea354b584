// `adworker bench-sample`: how long one validation sample takes on this machine, through the
// code path training uses (ValidationRenderer::SampleClip: DDIM + classifier-free guidance +
// chunked VAE decode), without writing files (so it runs on builds without FFmpeg too).
// Loads a diffusers SD folder (`make-tiny-pretrained --shape sd15` gives SD1.5's sizes), fresh
// or given motion modules, then times `repeat` samples; the first includes warm-up.
#pragma once

#include <cstdint>
#include <string>

namespace adctl {

struct BenchSampleOptions {
  std::string pretrained;      // diffusers SD folder (unet/, vae/, text_encoder/, tokenizer/)
  std::string motion_adapter;  // optional MotionAdapter folder (else fresh v2-layout modules)
  int64_t frames = 16;
  int64_t height = 256;
  int64_t width = 256;
  int64_t steps = 25;
  double guidance = 8;
  int repeat = 3;
  std::string out;  // JSON results file ("" : stdout only)
};

// Prints one JSON object (and writes it to `out`); returns the process exit code.
int BenchSample(const BenchSampleOptions& options);

}  // namespace adctl

// `adworker make-tiny-pretrained`: a small random Stable Diffusion folder in the exact public
// diffusers layout (model_index.json, unet/, vae/, text_encoder/, tokenizer/, scheduler/), for
// tests and the demo: the same loaders read it as they read SD1.5. The text encoder's width is
// the UNet's cross-attention width (32); its vocabulary (1000 tokens, eos 999) is the tokenizer's
// small BPE vocabulary; the VAE downsamples 4× (64² pixels → 16² latents).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace adctl {

Status MakeTinyPretrained(const std::string& out_dir, uint64_t seed);

}  // namespace adctl

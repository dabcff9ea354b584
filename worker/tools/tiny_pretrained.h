// `adworker make-tiny-pretrained`: a small random Stable Diffusion folder in the exact public
// diffusers layout (model_index.json, unet/, vae/, text_encoder/, tokenizer/, scheduler/), for
// tests and the demo: the same loaders read it as they read SD1.5. The text encoder's width is
// the UNet's cross-attention width (32); its vocabulary (1000 tokens, eos 999) is the tokenizer's
// small BPE vocabulary; the VAE downsamples 4× (64² pixels → 16² latents).
//
// `shape` "sd15": Stable Diffusion 1.5's real sizes (UNet 860 M, VAE 83 M, CLIP ViT-L/14 text
// tower 123 M, the full CLIP tokenizer read from `vocab`) with random weights, stored as the
// fp16 variants: for GPU benchmarks of preprocessing and sampling without downloading SD1.5.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace adctl {

// `shape`: "tiny" or "sd15"; `vocab` (sd15): CLIP's bpe_simple_vocab_16e6.txt.gz or an HF
// tokenizer folder.
Status MakeTinyPretrained(const std::string& out_dir, uint64_t seed,
                          const std::string& shape = "tiny", const std::string& vocab = "");

}  // namespace adctl

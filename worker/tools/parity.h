// `adworker check-parity` for the models around the UNet: run a reference input file through
// the text encoder or the VAE and write the outputs, for comparison with transformers/diffusers.
// Inputs and outputs are safetensors; names as in tests/fixtures/diffusers-tiny.
#pragma once

#include <string>

namespace adctl {

// --text-encoder DIR: `input_ids` [B, L] → `last_hidden_state`, `pooled`.
int CheckTextEncoderParity(const std::string& dir, const std::string& in, const std::string& out);
// --vae DIR: `image` [N, 3, H, W] in [−1, 1] → `mean`, `logvar`, `decoded` = decode(mean).
int CheckVaeParity(const std::string& dir, const std::string& in, const std::string& out);

}  // namespace adctl

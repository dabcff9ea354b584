// Training FLOPs per clip of an AnimateDiff UNet (frozen SD UNet, trainable motion modules), for
// model FLOPs utilisation (MFU). Counted once per configuration from the architecture, as in
// docs/research's layer-by-layer count (docs/metrics.md explains it):
//
//   forward     every convolution and linear (MACs = Cin·Cout·k²·Hout·Wout, in·out·tokens) and
//               every attention core (QKᵀ and AV: 2·Nq·Nk·C MACs); norms, activations and
//               element-wise ops are not counted (a few per cent);
//   backward    input gradients through every op from the first motion module on (the frozen
//               layers before it need none), attention cores twice (dQ, dK, dV and dP), plus the
//               weight gradients of the motion modules' linears;
//   training    2 · (forward + backward) FLOPs per clip (1 MAC = 2 FLOPs). Recomputation by
//               gradient checkpointing is not counted: MFU measures useful work.
//
// SD1.5 + v2 motion modules at 16 frames × 32×32 latents (256² pixels), 77 text tokens: 9.40
// TFLOP per clip (v1: 9.34). Pure function of the configs; thread-safe.
#pragma once

#include <cstdint>

#include "worker/model/config.h"

namespace adctl {

struct TrainingFlops {
  double forward_macs = 0;
  double motion_forward_macs = 0;  // of which the motion modules
  double backward_input_macs = 0;
  double backward_weight_macs = 0;
  double PerClip() const { return 2 * (forward_macs + backward_input_macs + backward_weight_macs); }
};

TrainingFlops CountTrainingFlops(const UNetConfig& unet, const MotionConfig& motion, int64_t frames,
                                 int64_t latent_height, int64_t latent_width,
                                 int64_t text_tokens = 77);

// Dense bf16 peak FLOP/s of a GPU by its name ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", …);
// 0 when the name is not in the table (MFU is then not reported).
double DenseBf16PeakFlops(const std::string& gpu_name);

}  // namespace adctl

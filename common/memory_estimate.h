// The peak GPU memory one training rank needs, estimated before anything runs (`adctl submit
// --dry-run`, SubmitPlan.memory). Torch-free: parameter counts come from the weights files'
// safetensors headers (nothing else is read), or from the preset's shape; the activations the
// backward pass keeps are a per-clip amount calibrated on the CUDA allocator's measured peaks at
// the reference shape (SD1.5 UNet + v2 motion modules, 16 × 32 × 32 latents, bf16; the numbers
// and their sources are in memory_estimate.cc) and scaled by the clip's latent positions and the
// UNet's width. The comparison with measured peaks away from the calibration points is
// bench/results/memory_estimate_h100_20261206.md. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

struct MemoryEstimate {
  int64_t weights_bytes = 0;     // frozen weights: the image UNet (and the base motion modules
                                 // under a MotionLoRA), in the compute precision
  int64_t trainable_bytes = 0;   // trained weights (fp32), gradients, AdamW's two moments, the
                                 // compute-precision copy the forward keeps, train.ema on the GPU
  int64_t activation_bytes = 0;  // kept for the backward pass: train.batch_size clips
  int64_t workspace_bytes = 0;   // kernels' workspaces, noise, text states, buckets
  int64_t trainable_params = 0;
  int64_t frozen_params = 0;
  std::string basis;  // where the counts come from ("safetensors headers of …", "preset sd15")
  int64_t peak_bytes() const {
    return weights_bytes + trainable_bytes + activation_bytes + workspace_bytes;
  }
};

// The estimate for a training job's rank on a GPU (train.precision auto is bf16 there).
// FailedPrecondition for a preprocess job (its peak is the VAE's, not estimated).
Result<MemoryEstimate> EstimateTrainingMemory(const JobSpec& spec);

}  // namespace adctl

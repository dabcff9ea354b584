// cuDNN builds its fused attention kernels at run time: NVRTC compiles each one, then the
// driver's PTX compiler turns it into machine code and keeps that in its on-disk cache
// (~/.nv/ComputeCache). In the first step of the first process on a machine those compilations
// run one after another (8-9 s for SD1.5's spatial attention at the reference shape, measured
// 2026-12-04: bench/results/mfu_startup_h200_20261204.md); later processes find the machine code in
// the cache and spend about a second. AttentionWarmup runs one forward and one backward of
// cuDNN's attention for each distinct shape of the UNet's spatial attention on a thread of its
// own while the rank sets up, so the compilations overlap each other and the set-up, and the
// first step finds them cached.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/job_spec.h"
#include "worker/model/config.h"

namespace adctl {

// One scaled-dot-product attention of the UNet: `batch` sequences (frames) of `queries` tokens
// over `keys` (the pixels again, or the text), `heads` heads of `head_dim`; text keys come
// once per clip (`clips` of them) and are repeated over its frames, as the model does.
struct AttentionShape {
  int64_t batch, heads, queries, keys, head_dim;
  bool cross;
  int64_t clips;
  bool operator==(const AttentionShape& o) const {
    return batch == o.batch && heads == o.heads && queries == o.queries && keys == o.keys &&
           head_dim == o.head_dim && cross == o.cross && clips == o.clips;
  }
};

// The distinct spatial self- and cross-attention shapes of a UNet for batches of `clips` clips
// of `frames` frames at `latent_height` × `latent_width`, with `text_len` text tokens.
std::vector<AttentionShape> SpatialAttentionShapes(const UNetConfig& unet, int64_t clips,
                                                   int64_t frames, int64_t latent_height,
                                                   int64_t latent_width, int64_t text_len);

class AttentionWarmup {
 public:
  // Starts the threads (none where cuDNN attention is unavailable: the CPU, LibTorch before
  // 2.5, attention kernels other than auto/cudnn).
  AttentionWarmup(std::vector<AttentionShape> shapes, torch::Device device, torch::ScalarType dtype,
                  AttentionKernel attention);
  ~AttentionWarmup();
  AttentionWarmup(const AttentionWarmup&) = delete;
  AttentionWarmup& operator=(const AttentionWarmup&) = delete;

  // Waits for the threads; returns how many shapes compiled (the others failed quietly: cuDNN
  // does not take every shape, and the model then runs another kernel anyway).
  int Wait();
  size_t started() const { return threads_.size(); }

 private:
  std::vector<std::thread> threads_;
  std::vector<char> ok_;
};

}  // namespace adctl

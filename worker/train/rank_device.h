// A training rank's device as its spec sets it up: the compute device and dtype
// (train.precision), the CUDA context, cuDNN's autotuner (train.cudnn_benchmark), the fused
// kernels (train.fused_kernels), the host threads a GPU rank may use, and the attention kernels
// (train.attention). Not thread-safe: once, before the model is built.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "common/worker_contract.h"
#include "worker/train/startup_timer.h"
#include "worker/train/trainer.h"

namespace adctl {

struct RankDevice {
  torch::Device device{torch::kCPU};
  torch::ScalarType compute_dtype = torch::kFloat;
};

// Sets the device up into `out` (the CUDA context timed as its own start-up phase in
// `startup`); kExitBadSpec for a train.attention this build cannot honour.
std::optional<Failure> SetUpRankDevice(const TrainerOptions& options, StartupTimer& startup,
                                       RankDevice& out);

}  // namespace adctl

#include "worker/train/rank_device.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "worker/compat.h"
#include "worker/kernels/dispatch.h"

namespace adctl {

std::optional<Failure> SetUpRankDevice(const TrainerOptions& options, StartupTimer& startup,
                                       RankDevice& out) {
  const TrainSpec& t = options.spec.train;
  out.device = compat::ComputeDevice();
  out.compute_dtype = compat::ComputeDtype(t.precision, out.device);
  const bool gpu = out.device.is_cuda();
  if (gpu) torch::empty({1}, out.device);  // the CUDA context, timed on its own
  startup.Mark("CUDA context");
  // cuDNN's autotuner times each convolution shape once (the first steps, before a CUDA graph
  // capture) and reuses its pick: shapes are fixed for the whole run.
  if (gpu) at::globalContext().setBenchmarkCuDNN(t.cudnn_benchmark);
  SetFusedKernels(t.fused_kernels);
  if (gpu && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // A GPU rank's CPU work is drawing the next batch (on the prefetch thread). With every rank
    // of a host spinning one OpenMP thread per core, the 2-GPU machine's ranks slowed each
    // other's data preparation 20x. Split the cores between the host's ranks, at most 8 each
    // (torchrun goes further and sets OMP_NUM_THREADS=1).
    const int ranks_here =
        std::max(1, options.local_world_size > 0 ? options.local_world_size : options.world_size);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    torch::set_num_threads(std::clamp(cores / ranks_here, 1, 8));
  }
  if (const std::string why = compat::SelectAttentionKernels(t.attention); !why.empty()) {
    return Failure{kExitBadSpec, "train.attention: " + why};
  }
  return std::nullopt;
}

}  // namespace adctl
